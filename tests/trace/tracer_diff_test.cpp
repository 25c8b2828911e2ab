// The function_graph tracer's per-call protocol exists twice: in C (ftrace/graph_fast.cpp
// and trace::Producer, behind the hooks) and as x86 emitted into each image
// (arch/x86_64/image.cpp, from ftrace::detail::inline_layout). Differential test: the
// same calls, recorded once with the inline path (the default) and once with it off
// (UTRAMP_NO_INLINE_TRACER=1: the image calls the hooks), must give the same events,
// times aside. Each scenario runs on a thread of its own (its tracer state and its
// trampoline counters start afresh; a longjmp pins what it jumped over until the
// thread ends): nesting and leaves, the depth limit, a ring that fills (with and without
// a consumer in between), a longjmp and an exception out of nested traced frames.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <csetjmp>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "ftrace/graph.hpp"
#include "ftrace/graph_state.hpp"
#include "ring_util.hpp"
#include "traced_calls.hpp"
#include "trace/shm_buffers.hpp"
#include "tramp/trampoline.hpp"

using namespace utramp;

namespace {

using test::call;

const std::map<uint64_t, std::string>& names() {
  static const std::map<uint64_t, std::string> n = {
      {reinterpret_cast<uint64_t>(&td_leaf), "td_leaf"},
      {reinterpret_cast<uint64_t>(&td_mid), "td_mid"},
      {reinterpret_cast<uint64_t>(&td_top), "td_top"},
      {reinterpret_cast<uint64_t>(&td_deep), "td_deep"},
      {reinterpret_cast<uint64_t>(&td_jump), "td_jump"},
      {reinterpret_cast<uint64_t>(&td_throw), "td_throw"},
  };
  return n;
}

const char* type_name(uint8_t t) {
  switch (static_cast<trace::EventType>(t)) {
    case trace::EventType::entry: return "entry";
    case trace::EventType::exit: return "exit";
    case trace::EventType::exit_unwound: return "exit_unwound";
    case trace::EventType::exit_longjmp: return "exit_longjmp";
    case trace::EventType::lost: return "lost";
    case trace::EventType::depth_overrun: return "depth_overrun";
    case trace::EventType::leaf: return "leaf";
    default: return "other";
  }
}

// One line per event, times left out (a leaf's data is its exit time).
void render(std::string& out, std::span<const trace::Event> events) {
  for (const trace::Event& e : events) {
    const auto t = static_cast<trace::EventType>(e.type);
    auto n = names().find(e.addr);
    const std::string fn = n != names().end() ? n->second : fmt::format("{:#x}", e.addr);
    const uint64_t data = t == trace::EventType::leaf ? 0 : e.data;
    out += fmt::format("{:>2} {:<13} {} data={} flags={} aux={}\n", e.depth, type_name(e.type),
                       fn, data, e.flags, e.aux);
  }
}

struct Scenario {
  uint32_t ring = 1u << 12;  // events per ring
  uint32_t max_depth = 0;    // -D
  // Runs on the traced thread; `drain()` empties the ring in between (as the CLI would).
  std::function<void(const std::function<void()>& drain)> run;
};

// The events `s` records, with the inline path on or off.
std::string record(const Scenario& s, bool inline_path) {
  if (!inline_path) setenv("UTRAMP_NO_INLINE_TRACER", "1", 1);
  test::TempDir dir;
  auto buffers = trace::ShmBuffers::create(dir / "buffers.shm",
                                           trace::ShmConfig{4, s.ring, trace::BufferMode::discard});
  EXPECT_TRUE(buffers.ok()) << buffers.error().message;
  if (!buffers.ok()) return {};
  ftrace::Options opts;
  opts.max_depth = s.max_depth;
  ftrace::configure(&*buffers, opts);
  const arch::TracerHooks hooks = ftrace::hooks();
  unsetenv("UTRAMP_NO_INLINE_TRACER");
  EXPECT_EQ(hooks.inline_path, inline_path);

  auto& mgr = tramp::Manager::instance();
  std::vector<tramp::Link*> links;
  for (const auto& [addr, name] : names()) {
    auto l = mgr.attach(addr, tramp::AttachType::tracer, reinterpret_cast<uint64_t>(&hooks), {});
    EXPECT_TRUE(l.ok()) << name << ": " << l.error().message;
    if (l.ok()) links.push_back(*l);
  }
  std::string out;
  auto drain = [&] {
    buffers->drain([&](uint32_t, uint32_t, std::span<const trace::Event> ev, uint64_t) {
      render(out, ev);
    });
  };
  std::thread t([&] {
    s.run(drain);
    ftrace::close_thread();
  });
  t.join();
  for (tramp::Link* l : links) EXPECT_TRUE(mgr.detach(l).ok());
  buffers->drain([&](uint32_t, uint32_t, std::span<const trace::Event> ev, uint64_t) {
    render(out, ev);
  }, /*final=*/true);
  mgr.reclaim_now();
  return out;
}

void expect_same(const Scenario& s, size_t min_lines) {
  const std::string in_image = record(s, true);
  const std::string in_hooks = record(s, false);
  EXPECT_EQ(in_image, in_hooks) << "inline path (left) and C hooks (right) disagree";
  EXPECT_GE(std::count(in_image.begin(), in_image.end(), '\n'), ptrdiff_t(min_lines)) << in_image;
}

// Calls `f` as a signal handler that interrupted the tracer's own code would: with the
// thread's "inside the tracer" word (the one the images read: TracerInline::
// tls_in_tracer) held by a frame above. Its events are dropped and counted lost, and
// the next event written marks the loss.
__attribute__((noinline)) int call_inside_tracer(int (*f)(int), int x) {
  auto* word = reinterpret_cast<uint64_t*>(static_cast<char*>(__builtin_thread_pointer()) +
                                           ftrace::detail::inline_layout(0).tls_in_tracer);
  uint64_t sp;
  asm volatile("mov %%rsp, %0" : "=r"(sp));
  *word = sp;
  const int r = call(f, x);
  *word = 0;
  return r;
}

// setjmp's caller: nothing of it lives across the longjmp.
__attribute__((noinline)) void jump_over(int n) {
  std::jmp_buf env;
  if (setjmp(env) == 0) call(&td_jump, &env, n);
}

class TracerDiff : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tramp::set_unwind_hook(&ftrace::on_unwind); }
  static void TearDownTestSuite() { tramp::set_unwind_hook(nullptr); }
};

TEST_F(TracerDiff, NestingAndLeaves) {
  Scenario s;
  s.run = [](auto&) {
    for (int i = 0; i < 50; ++i) ASSERT_EQ(call(&td_top, i), 3 * i + 6);
    ASSERT_EQ(call(&td_deep, 20), 21);
    ASSERT_EQ(call(&td_leaf, 1), 2);
  };
  expect_same(s, 50 * 6);
}

TEST_F(TracerDiff, DepthLimit) {
  Scenario s;
  s.max_depth = 3;
  s.run = [](auto&) {
    for (int i = 0; i < 10; ++i) {
      ASSERT_EQ(call(&td_deep, 6), 7);
      ASSERT_EQ(call(&td_top, i), 3 * i + 6);
    }
  };
  expect_same(s, 10 * 8);
}

TEST_F(TracerDiff, FullRing) {
  // 64 slots and no consumer until the end: the ring fills and every later event is
  // dropped, counted and marked.
  Scenario s;
  s.ring = 64;
  s.run = [](auto&) {
    for (int i = 0; i < 100; ++i) ASSERT_EQ(call(&td_top, i), 3 * i + 6);
  };
  expect_same(s, 30);
}

TEST_F(TracerDiff, FullRingDrainedBetween) {
  // A consumer between bursts: losses are marked in the stream by the next write.
  Scenario s;
  s.ring = 64;
  s.run = [](const std::function<void()>& drain) {
    for (int round = 0; round < 5; ++round) {
      for (int i = 0; i < 30; ++i) ASSERT_EQ(call(&td_top, i), 3 * i + 6);
      drain();
    }
  };
  expect_same(s, 5 * 30);
}

TEST_F(TracerDiff, Longjmp) {
  Scenario s;
  s.run = [](auto&) {
    for (int i = 0; i < 5; ++i) {
      jump_over(4);
      ASSERT_EQ(call(&td_top, i), 3 * i + 6);  // its entry closes the frames left
    }
  };
  expect_same(s, 5 * (5 + 5 + 6));
}

TEST_F(TracerDiff, Exception) {
  Scenario s;
  s.run = [](auto&) {
    for (int i = 0; i < 5; ++i) {
      bool caught = false;
      try {
        call(&td_throw, 4);
      } catch (const std::runtime_error&) {
        caught = true;
      }
      ASSERT_TRUE(caught);
      ASSERT_EQ(call(&td_top, i), 3 * i + 6);
    }
  };
  expect_same(s, 5 * (5 + 5 + 6));
}

TEST_F(TracerDiff, CallsInsideTheTracer) {
  // Losses with room in the ring: each must be marked before the next event.
  Scenario s;
  s.run = [](auto&) {
    for (int i = 0; i < 10; ++i) {
      ASSERT_EQ(call(&td_top, i), 3 * i + 6);
      ASSERT_EQ(call_inside_tracer(&td_mid, i), 2 * i + 4);
      ASSERT_EQ(call_inside_tracer(&td_leaf, i), i + 1);
    }
  };
  expect_same(s, 10 * 7);
}

}  // namespace
