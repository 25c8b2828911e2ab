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
  // record -F/-N: functions attached with a scope's hooks (ftrace::scope_hooks).
  std::map<std::string, ftrace::Scope> scopes;
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
  for (const auto& [name, scope] : s.scopes) opts.filter_scopes |= scope == ftrace::Scope::filter;
  ftrace::configure(&*buffers, opts);
  const arch::TracerHooks hooks = ftrace::hooks();
  const arch::TracerHooks filter_hooks = ftrace::scope_hooks(ftrace::Scope::filter);
  const arch::TracerHooks notrace_hooks = ftrace::scope_hooks(ftrace::Scope::notrace);
  unsetenv("UTRAMP_NO_INLINE_TRACER");
  // -F with -D: the depth limit is per thread, which only the C hooks read.
  EXPECT_EQ(hooks.inline_path, inline_path && !(opts.filter_scopes && s.max_depth));

  auto& mgr = tramp::Manager::instance();
  std::vector<tramp::Link*> links;
  for (const auto& [addr, name] : names()) {
    const auto sc = s.scopes.find(name);
    const arch::TracerHooks* h = sc == s.scopes.end()                 ? &hooks
                                 : sc->second == ftrace::Scope::filter ? &filter_hooks
                                                                       : &notrace_hooks;
    auto l = mgr.attach(addr, tramp::AttachType::tracer, reinterpret_cast<uint64_t>(h), {});
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

std::string expect_same(const Scenario& s, size_t min_lines) {
  const std::string in_image = record(s, true);
  const std::string in_hooks = record(s, false);
  EXPECT_EQ(in_image, in_hooks) << "inline path (left) and C hooks (right) disagree";
  EXPECT_GE(std::count(in_image.begin(), in_image.end(), '\n'), ptrdiff_t(min_lines)) << in_image;
  return in_image;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
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

// record -F td_mid: td_mid and what it calls, in every call of it; nothing of td_top
// (its caller), nor td_leaf called outside td_mid.
TEST_F(TracerDiff, FilterScope) {
  Scenario s;
  s.scopes = {{"td_mid", ftrace::Scope::filter}};
  s.run = [](auto&) {
    for (int i = 0; i < 10; ++i) ASSERT_EQ(call(&td_top, i), 3 * i + 6);
    ASSERT_EQ(call(&td_leaf, 1), 2);
  };
  const std::string out = expect_same(s, 10 * 3);
  EXPECT_EQ(count(out, "td_top"), 0u) << out;
  EXPECT_EQ(count(out, " 0 entry         td_mid"), 10u) << out;
  EXPECT_EQ(count(out, " 1 leaf          td_leaf"), 20u) << out;  // two per td_mid, none outside
}

// record -F td_top -D 2: td_top and what it calls (td_mid, td_leaf), td_mid's own calls
// counted below the limit.
TEST_F(TracerDiff, FilterScopeDepth) {
  Scenario s;
  s.scopes = {{"td_top", ftrace::Scope::filter}};
  s.max_depth = 2;
  s.run = [](auto&) {
    for (int i = 0; i < 10; ++i) ASSERT_EQ(call(&td_top, i), 3 * i + 6);
  };
  const std::string out = expect_same(s, 10 * 3);
  EXPECT_EQ(count(out, "\n 2 "), 0u) << out;
  EXPECT_EQ(count(out, " 1 leaf          td_mid"), 10u) << out;
  EXPECT_EQ(count(out, " 1 leaf          td_leaf"), 10u) << out;
  EXPECT_NE(out.find("depth_overrun 0x0 data=20 "), std::string::npos) << out;  // 2 per td_mid
}

// record -N td_mid: td_top and the td_leaf it calls itself, nothing inside td_mid.
TEST_F(TracerDiff, NotraceScope) {
  Scenario s;
  s.scopes = {{"td_mid", ftrace::Scope::notrace}};
  s.run = [](auto&) {
    for (int i = 0; i < 10; ++i) ASSERT_EQ(call(&td_top, i), 3 * i + 6);
  };
  const std::string out = expect_same(s, 10 * 3);
  EXPECT_EQ(count(out, "td_mid"), 0u) << out;
  EXPECT_EQ(count(out, " 1 leaf          td_leaf"), 10u) << out;
  EXPECT_EQ(count(out, " 0 exit          td_top"), 10u) << out;
}

// A longjmp out of a -F call closes its scope: the calls made after it are outside, not
// recorded (the scope is closed where the tracer closes the frames the jump left).
TEST_F(TracerDiff, LongjmpLeavesFilterScope) {
  Scenario s;
  s.scopes = {{"td_jump", ftrace::Scope::filter}};
  s.run = [](auto&) {
    for (int i = 0; i < 5; ++i) {
      jump_over(4);
      ASSERT_EQ(call(&td_top, i), 3 * i + 6);
    }
  };
  const std::string out = expect_same(s, 5 * 5);
  EXPECT_EQ(count(out, "td_top"), 0u) << out;
  EXPECT_EQ(count(out, "td_leaf"), 0u) << out;
  EXPECT_EQ(count(out, "entry         td_jump"), 5u * 5u) << out;
}

}  // namespace
