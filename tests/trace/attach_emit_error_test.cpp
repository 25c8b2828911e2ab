// An instruction that cannot be emitted anywhere in an attach (the stub, the image, the
// jumps the patch writes) fails the attach with the emitter's report, and leaves the
// function as it was: each instruction of the whole attach is failed in turn through
// the emitters' test hook (arch/x86_64/asm_util.hpp), until the attach succeeds.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "arch/x86_64/asm_util.hpp"
#include "ftrace/graph.hpp"
#include "ring_util.hpp"
#include "traced_calls.hpp"
#include "trace/shm_buffers.hpp"
#include "tramp/trampoline.hpp"

using namespace utramp;

namespace {

using test::call;

uint64_t g_runs = 0, g_kept_runs = 0;
uint64_t count_run(uint64_t*) {
  ++g_runs;
  return 0;
}
uint64_t count_kept(uint64_t*) {
  ++g_kept_runs;
  return 0;
}

// Attaches `type` with `prog` to `fn` while the n-th instruction emitted fails, for
// n = 1, 2, ... until the attach succeeds. Each failure must name what was emitted, and
// leave `fn` running as before, untraced. Returns the instructions an attach emits.
template <class F>
uint32_t fail_each(F* fn, tramp::AttachType type, uint64_t prog, int (*check)(F*)) {
  auto& mgr = tramp::Manager::instance();
  const auto addr = reinterpret_cast<uint64_t>(fn);
  for (uint32_t n = 1; n < 5000; ++n) {
    arch::x86::testing::t_fail_emit_at = n;
    auto l = mgr.attach(addr, type, prog, {});
    const uint32_t left = arch::x86::testing::t_fail_emit_at;
    arch::x86::testing::t_fail_emit_at = 0;
    if (l.ok()) {
      EXPECT_NE(left, 0u) << "instruction " << n << " failed and the attach succeeded";
      const uint64_t before = g_runs;
      check(fn);
      if (type != tramp::AttachType::tracer) {
        EXPECT_EQ(g_runs, before + 1);
      }
      EXPECT_TRUE(mgr.detach(*l).ok());
      mgr.reclaim_now();
      return n - 1;
    }
    EXPECT_EQ(left, 0u) << "failed before instruction " << n << ": " << l.error().message;
    const std::string& m = l.error().message;
    EXPECT_NE(m.find("cannot emit"), std::string::npos) << "instruction " << n << ": " << m;
    EXPECT_NE(m.find("failed by a test"), std::string::npos) << "instruction " << n << ": " << m;
    const uint64_t before = g_runs;
    check(fn);
    EXPECT_EQ(g_runs, before) << "instruction " << n << ": a program runs after a failed attach";
  }
  ADD_FAILURE() << "the attach never succeeds";
  return 0;
}

int check_leaf(int (*f)(int)) {
  EXPECT_EQ(call(f, 41), 42);
  return 0;
}

int check_mid(int (*f)(int)) {
  EXPECT_EQ(call(f, 1), 6);
  return 0;
}

TEST(AttachEmitError, ProgramsFirstAndOnAnExistingTrampoline) {
  const uint64_t prog = reinterpret_cast<uint64_t>(&count_run);
  // The first link of a function: its stub, its image, the patch of its hop.
  EXPECT_GT(fail_each(&td_leaf, tramp::AttachType::fentry, prog, &check_leaf), 30u);
  EXPECT_GT(fail_each(&td_leaf, tramp::AttachType::fexit, prog, &check_leaf), 30u);
  // A second link beside one that stays: a new image and the hop moved to it.
  auto& mgr = tramp::Manager::instance();
  auto keep = mgr.attach(reinterpret_cast<uint64_t>(&td_mid), tramp::AttachType::fentry,
                         reinterpret_cast<uint64_t>(&count_kept), {});
  ASSERT_TRUE(keep.ok()) << keep.error().message;
  const uint32_t n = fail_each(&td_mid, tramp::AttachType::fexit, prog, &check_mid);
  EXPECT_GT(n, 30u);
  EXPECT_EQ(g_kept_runs, n + 1) << "the link that stays runs at every call, failed attaches or not";
  ASSERT_TRUE(mgr.detach(*keep).ok());
  mgr.reclaim_now();
}

TEST(AttachEmitError, TracerLink) {
  test::TempDir dir;
  auto buffers = trace::ShmBuffers::create(dir / "buffers.shm",
                                           trace::ShmConfig{4, 1u << 10, trace::BufferMode::discard});
  ASSERT_TRUE(buffers.ok()) << buffers.error().message;
  ftrace::configure(&*buffers, ftrace::Options{});
  const arch::TracerHooks hooks = ftrace::hooks();
  ASSERT_TRUE(hooks.inline_path);
  EXPECT_GT(fail_each(&td_leaf, tramp::AttachType::tracer, reinterpret_cast<uint64_t>(&hooks),
                      &check_leaf),
            100u);
  ftrace::close_thread();
}

}  // namespace
