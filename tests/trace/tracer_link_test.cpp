// A tracer link in process (AttachType::tracer with the function_graph hooks), alone and
// with fentry/fexit programs on the same function: arguments and return values (integer
// and floating) pass through intact, every call is recorded exactly once, the programs
// still run, and detaching leaves the function as it was; utramp's own calls are not
// recorded. Both ways of doing the
// tracer's common case: inline in the image, and in the hooks.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <map>
#include <thread>
#include <vector>

#include "ftrace/graph.hpp"
#include "ring_util.hpp"
#include "traced_calls.hpp"
#include "tramp/threads.hpp"
#include "tramp/trampoline.hpp"
#include "trace/shm_buffers.hpp"

extern "C" {
int64_t tt_add(int64_t, int64_t);
double tt_mix(int, double, float, long);
}

using namespace utramp;

namespace {

using test::call;

uint64_t g_fexit_runs = 0;
uint64_t count_fexit(uint64_t*) {
  ++g_fexit_runs;
  return 0;
}

struct Calls {
  std::map<uint64_t, uint64_t> entries, exits;  // by function
  uint64_t events = 0;
};

Calls drain(trace::ShmBuffers& b) {
  Calls c;
  b.drain([&](uint32_t, uint32_t, std::span<const trace::Event> ev, uint64_t lost) {
    EXPECT_EQ(lost, 0u);
    for (const auto& e : ev) {
      ++c.events;
      const auto t = static_cast<trace::EventType>(e.type);
      if (t == trace::EventType::entry || t == trace::EventType::leaf) ++c.entries[e.addr];
      if (t == trace::EventType::exit || t == trace::EventType::leaf) ++c.exits[e.addr];
      if (t == trace::EventType::leaf) {
        EXPECT_GE(e.data, e.time);
      }
    }
  }, /*final=*/true);
  return c;
}

Result<trace::ShmBuffers> tracer_buffers(const test::TempDir& dir) {
  return trace::ShmBuffers::create(dir / "buffers.shm",
                                   trace::ShmConfig{4, 1u << 16, trace::BufferMode::discard});
}

// The tracer records into B (which must outlive the test's calls); its hooks.
arch::TracerHooks configure_tracer(trace::ShmBuffers& b) {
  ftrace::Options opts;
  ftrace::configure(&b, opts);
  return ftrace::hooks();
}

void run(bool inline_path) {
  if (!inline_path) setenv("UTRAMP_NO_INLINE_TRACER", "1", 1);
  test::TempDir dir;
  auto buffers = tracer_buffers(dir);
  ASSERT_TRUE(buffers.ok()) << buffers.error().message;
  const arch::TracerHooks hooks = configure_tracer(*buffers);
  unsetenv("UTRAMP_NO_INLINE_TRACER");
  EXPECT_EQ(hooks.inline_path, inline_path);

  auto& mgr = tramp::Manager::instance();
  const auto add = reinterpret_cast<uint64_t>(&tt_add), mix = reinterpret_cast<uint64_t>(&tt_mix);
  auto t1 = mgr.attach(add, tramp::AttachType::tracer, reinterpret_cast<uint64_t>(&hooks), {});
  ASSERT_TRUE(t1.ok()) << t1.error().message;
  auto t2 = mgr.attach(mix, tramp::AttachType::tracer, reinterpret_cast<uint64_t>(&hooks), {});
  ASSERT_TRUE(t2.ok()) << t2.error().message;
  auto again = mgr.attach(add, tramp::AttachType::tracer, reinterpret_cast<uint64_t>(&hooks), {});
  EXPECT_FALSE(again.ok()) << "a second tracer on one function";

  constexpr int kCalls = 1000;
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_EQ(call(&tt_add, int64_t(i), int64_t(2)), i + 2);
    ASSERT_EQ(call(&tt_mix, i, 0.5, 0.25f, 3L), i + 1.0 + 0.75 + 12.0);
  }
  // utramp's own calls of a traced function — the agent at work on a program's thread
  // (record --libs traces the library functions it calls), a thread utramp started —
  // are neither recorded nor counted lost (drain() checks nothing was lost).
  {
    ftrace::AtWork busy;
    for (int i = 0; i < 100; ++i) ASSERT_EQ(call(&tt_add, int64_t(i), int64_t(2)), i + 2);
  }
  std::thread([] {
    tramp::t_utramp_thread = true;
    for (int i = 0; i < 100; ++i) EXPECT_EQ(call(&tt_add, int64_t(i), int64_t(3)), i + 3);
    ftrace::close_thread();
  }).join();
  // A program on the same function as the tracer: both run.
  g_fexit_runs = 0;
  auto p = mgr.attach(mix, tramp::AttachType::fexit, reinterpret_cast<uint64_t>(&count_fexit), {});
  ASSERT_TRUE(p.ok()) << p.error().message;
  for (int i = 0; i < kCalls; ++i) ASSERT_EQ(call(&tt_mix, i, 1.5, 2.0f, -1L), i + 3.0 + 6.0 - 4.0);
  EXPECT_EQ(g_fexit_runs, uint64_t(kCalls));

  ASSERT_TRUE(mgr.detach(*t1).ok());
  ASSERT_TRUE(mgr.detach(*t2).ok());
  ASSERT_TRUE(mgr.detach(*p).ok());
  for (int i = 0; i < 10; ++i) ASSERT_EQ(call(&tt_add, int64_t(i), int64_t(1)), i + 1);
  ftrace::close_thread();
  Calls c = drain(*buffers);
  EXPECT_EQ(c.entries[add], uint64_t(kCalls));
  EXPECT_EQ(c.exits[add], uint64_t(kCalls));
  EXPECT_EQ(c.entries[mix], uint64_t(2 * kCalls));
  EXPECT_EQ(c.exits[mix], uint64_t(2 * kCalls));
  mgr.reclaim_now();
}

}  // namespace

TEST(TracerLink, InlineInTheImage) { run(true); }

// A thread's first traced call maps its tracing state (some 70 KB of frames, mostly
// never reached) and touches only what it uses: the state is fresh zero pages, and
// zeroing it again faulted in every page of it (18 per thread at start-up).
TEST(TracerLink, AThreadsFirstCallTouchesLittleOfItsState) {
  test::TempDir dir;
  auto buffers = tracer_buffers(dir);
  ASSERT_TRUE(buffers.ok()) << buffers.error().message;
  const arch::TracerHooks hooks = configure_tracer(*buffers);
  auto& mgr = tramp::Manager::instance();
  const auto add = reinterpret_cast<uint64_t>(&tt_add);
  auto t = mgr.attach(add, tramp::AttachType::tracer, reinterpret_cast<uint64_t>(&hooks), {});
  ASSERT_TRUE(t.ok()) << t.error().message;
  long faults = -1;
  std::thread([&] {  // its state is made at its first traced call
    rusage before{}, after{};
    ASSERT_EQ(getrusage(RUSAGE_THREAD, &before), 0);
    ASSERT_EQ(call(&tt_add, int64_t(4), int64_t(5)), 9);
    ASSERT_EQ(getrusage(RUSAGE_THREAD, &after), 0);
    faults = after.ru_minflt - before.ru_minflt;
    ftrace::close_thread();
  }).join();
  ASSERT_TRUE(mgr.detach(*t).ok());
  (void)drain(*buffers);
  mgr.reclaim_now();
  EXPECT_GE(faults, 0);
  EXPECT_LT(faults, 10) << "the thread's first call touched its whole tracing state";
}
TEST(TracerLink, ThroughTheHooks) { run(false); }
