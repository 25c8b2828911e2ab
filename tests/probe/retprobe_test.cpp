// Return probes: return values, C++ exceptions through hijacked frames, longjmp,
// maxactive, threads, fork and thread cancellation.
#include <execinfo.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>

#include <stdexcept>
#include <thread>

#include "flow_targets.h"
#include "probe_test_util.hpp"

extern "C" {
int pt_throw(int x);
int pt_throw_outer(int x);
int pt_catch_inside(int x);
int pt_throw_with_guard(int x, int* destroyed);
}

namespace {

using namespace probe_test;
using utramp::probe::Manager;
using utramp::probe::State;

struct Calls {
  std::atomic<uint64_t> entries{0}, returns{0};
  std::atomic<int64_t> last_ret{0}, last_arg{0};
  std::atomic<uint64_t> last_rip{0};
};

int on_entry(utramp_regs* r, uint64_t cookie) {
  auto* c = reinterpret_cast<Calls*>(cookie);
  c->entries.fetch_add(1);
  c->last_arg = static_cast<int64_t>(r->rdi);
  return 0;
}

int on_return(utramp_regs* r, uint64_t cookie) {
  auto* c = reinterpret_cast<Calls*>(cookie);
  c->returns.fetch_add(1);
  c->last_ret = static_cast<int64_t>(r->rax);
  c->last_rip = r->rip;
  return 0;
}

class Retprobes : public ::testing::Test {
 protected:
  void TearDown() override {
    for (utramp_probe* p : attached_) EXPECT_EQ(utramp_probe_detach(p), 0) << last_error();
    EXPECT_TRUE(Manager::instance().list().empty());
  }
  template <class F>
  utramp_probe* retprobe(F* func, Calls& c, int maxactive = 0) {
    utramp_probe* p = utramp_retprobe_attach(reinterpret_cast<void*>(func), on_entry, on_return,
                                             reinterpret_cast<uint64_t>(&c), maxactive);
    EXPECT_NE(p, nullptr) << last_error();
    if (p) attached_.push_back(p);
    return p;
  }
  void detach(utramp_probe* p) {
    ASSERT_EQ(utramp_probe_detach(p), 0) << last_error();
    std::erase(attached_, p);
  }
  uint64_t misses(void* func) {
    auto i = info_at(reinterpret_cast<uint64_t>(func));
    return i ? i->misses : ~uint64_t{0};
  }
  std::vector<utramp_probe*> attached_;
};

TEST_F(Retprobes, SeeArgumentsAndReturnValues) {
  Calls c;
  retprobe(&pt_add, c);
  for (int i = 0; i < 20; ++i) ASSERT_EQ(opaque(&pt_add)(i, 100), i + 100);
  EXPECT_EQ(c.entries.load(), 20u);
  EXPECT_EQ(c.returns.load(), 20u);
  EXPECT_EQ(c.last_arg.load(), 19);
  EXPECT_EQ(c.last_ret.load(), 119);
  auto i = info_at(addr_of(&pt_add));
  ASSERT_TRUE(i);
  EXPECT_TRUE(i->retprobe);
  EXPECT_EQ(i->hits, 20u);
  EXPECT_EQ(i->misses, 0u);
}

int change_ret(utramp_regs* r, uint64_t) {
  r->rax = 4242;
  return 0;
}

TEST_F(Retprobes, ReturnHandlerMayChangeTheReturnValue) {
  utramp_probe* p = utramp_retprobe_attach(at(&pt_sub), nullptr, change_ret, 0, 0);
  ASSERT_NE(p, nullptr) << last_error();
  attached_.push_back(p);
  EXPECT_EQ(opaque(&pt_sub)(5, 1), 4242);
}

int skip_call(utramp_regs*, uint64_t) { return 1; }

TEST_F(Retprobes, EntryHandlerReturningNonZeroDoesNotRecordTheCall) {
  Calls c;
  utramp_probe* p = utramp_retprobe_attach(at(&pt_other), skip_call, on_return,
                                           reinterpret_cast<uint64_t>(&c), 0);
  ASSERT_NE(p, nullptr) << last_error();
  attached_.push_back(p);
  EXPECT_EQ(opaque(&pt_other)(0), 0x5a);
  EXPECT_EQ(c.returns.load(), 0u);
}

TEST_F(Retprobes, ExceptionsUnwindThroughHijackedFrames) {
  Calls inner, outer;
  retprobe(&pt_throw, inner);
  retprobe(&pt_throw_outer, outer);
  for (int round = 0; round < 3; ++round) {
    try {
      opaque(&pt_throw_outer)(-1);
      FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "negative");
    }
    // The returns that did not happen are not reported, and leave nothing behind: the
    // next calls return through the trampoline normally.
    EXPECT_EQ(opaque(&pt_throw_outer)(4), 9);
  }
  EXPECT_EQ(inner.entries.load(), 6u);
  EXPECT_EQ(outer.entries.load(), 6u);
  EXPECT_EQ(inner.returns.load(), 3u);
  EXPECT_EQ(outer.returns.load(), 3u);
  EXPECT_EQ(outer.last_ret.load(), 9);
  EXPECT_EQ(misses(at(&pt_throw)), 0u);
  EXPECT_EQ(misses(at(&pt_throw_outer)), 0u);
  // Caught inside a probed function's callee: no unwind reaches a trampoline.
  EXPECT_EQ(opaque(&pt_catch_inside)(-3), -1);
  EXPECT_EQ(opaque(&pt_catch_inside)(3), 6);
}

TEST_F(Retprobes, DestructorsInHijackedFramesRunDuringTheUnwind) {
  Calls c;
  retprobe(&pt_throw_with_guard, c);
  int destroyed = 0;
  EXPECT_THROW(opaque(&pt_throw_with_guard)(-1, &destroyed), std::runtime_error);
  EXPECT_EQ(destroyed, 1);
  EXPECT_EQ(opaque(&pt_throw_with_guard)(2, &destroyed), 9);
  EXPECT_EQ(destroyed, 2);
  EXPECT_EQ(c.returns.load(), 1u);
}

TEST_F(Retprobes, LongjmpLeavesStaleInstancesThatAreDroppedAndCounted) {
  Calls c;
  retprobe(&pt_jump_out, c, 128);
  for (int round = 0; round < 100; ++round) {
    jmp_buf env;
    if (setjmp(env) == 0) {
      opaque(&pt_jump_out)(&env, 5);  // six hijacked frames, none returns
      FAIL() << "no longjmp";
    }
  }
  EXPECT_EQ(c.entries.load(), 600u);
  EXPECT_EQ(c.returns.load(), 0u);
  // Each round's instances are dropped when the next round reuses their stack slots:
  // 100 rounds never exhaust the 128 instances a thread may have.
  EXPECT_GE(misses(at(&pt_jump_out)), 594u);
  EXPECT_LE(misses(at(&pt_jump_out)), 600u);
  // A normal call of another probed function still returns correctly.
  Calls d;
  retprobe(&pt_work, d);
  EXPECT_EQ(opaque(&pt_work)(20), 41);
  EXPECT_EQ(d.returns.load(), 1u);
}

TEST_F(Retprobes, MaxactiveBoundsInstancesPerThreadAndCountsMisses) {
  Calls c;
  retprobe(&pt_recurse, c, 4);
  EXPECT_EQ(opaque(&pt_recurse)(10), 55);
  EXPECT_EQ(c.entries.load(), 10u);
  EXPECT_EQ(c.returns.load(), 4u);  // the four outermost calls were recorded
  EXPECT_EQ(misses(at(&pt_recurse)), 6u);
  // Once they returned, the next calls are recorded again.
  EXPECT_EQ(opaque(&pt_recurse)(3), 6);
  EXPECT_EQ(c.returns.load(), 7u);
  EXPECT_EQ(misses(at(&pt_recurse)), 6u);
  errno = 0;
  EXPECT_EQ(utramp_retprobe_attach(at(&pt_recurse), on_entry, on_return, 0, 1000), nullptr);
  EXPECT_EQ(errno, ERANGE) << last_error();
}

TEST_F(Retprobes, ThreadsEachKeepTheirOwnInstances) {
  Calls c;
  retprobe(&pt_work, c);
  constexpr int kThreads = 4, kCalls = 20000;
  std::vector<std::thread> ts;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i)
        if (opaque(&pt_work)(t * kCalls + i) != 2L * (t * kCalls + i) + 1) wrong.fetch_add(1);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(c.entries.load(), uint64_t{kThreads} * kCalls);
  EXPECT_EQ(c.returns.load(), uint64_t{kThreads} * kCalls);
  EXPECT_EQ(misses(at(&pt_work)), 0u);
}

TEST_F(Retprobes, ForkInsideAHijackedFrameReturnsInBothProcesses) {
  Calls c;
  retprobe(&pt_fork_in, c);
  const long r = opaque(&pt_fork_in)(5);
  if (r == 1005) {
    // The child: it returned through the trampoline with its copy of the instance.
    _exit(c.returns.load() == 1 && c.last_ret.load() == 1005 ? 42 : 1);
  }
  ASSERT_EQ(r, 5);
  int status = 0;
  ASSERT_GT(wait(&status), 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 42);
  EXPECT_EQ(c.returns.load(), 1u);
  EXPECT_EQ(c.last_ret.load(), 5);
}

// pthread_exit from inside a hijacked frame: the forced unwind passes the trampoline.
extern "C" __attribute__((noinline)) long pt_exit_inside(long x) {
  if (x == 1) pthread_exit(nullptr);
  return x;
}

TEST_F(Retprobes, ThreadCancellationUnwindsThroughHijackedFrames) {
  Calls c;
  retprobe(&pt_exit_inside, c);
  std::thread t([] { opaque(&pt_exit_inside)(1); });
  t.join();
  EXPECT_EQ(c.entries.load(), 1u);
  EXPECT_EQ(c.returns.load(), 0u);
  EXPECT_EQ(opaque(&pt_exit_inside)(3), 3);
  EXPECT_EQ(c.returns.load(), 1u);
}

TEST_F(Retprobes, RetprobesAndProbesShareAnEntry) {
  Calls c;
  std::atomic<uint64_t> n{0};
  retprobe(&pt_add, c);
  utramp_probe* p = utramp_probe_attach(at(&pt_add), count_hit, nullptr, cookie_of(n));
  ASSERT_NE(p, nullptr) << last_error();
  attached_.push_back(p);
  EXPECT_EQ(opaque(&pt_add)(2, 3), 5);
  EXPECT_EQ(n.load(), 1u);
  EXPECT_EQ(c.returns.load(), 1u);
  EXPECT_EQ(c.last_ret.load(), 5);
}

TEST_F(Retprobes, TwoReturnProbesOnOneFunctionChainTheirInstances) {
  Calls a, b;
  retprobe(&pt_work, a);
  retprobe(&pt_work, b);
  EXPECT_EQ(opaque(&pt_work)(10), 21);
  EXPECT_EQ(a.returns.load(), 1u);
  EXPECT_EQ(b.returns.load(), 1u);
  EXPECT_EQ(a.last_ret.load(), 21);
  EXPECT_EQ(b.last_ret.load(), 21);
  // Through an exception too.
  Calls c, d;
  retprobe(&pt_throw, c);
  retprobe(&pt_throw, d);
  EXPECT_THROW(opaque(&pt_throw_outer)(-2), std::runtime_error);
  EXPECT_EQ(opaque(&pt_throw_outer)(2), 5);
  EXPECT_EQ(c.returns.load(), 1u);
  EXPECT_EQ(d.returns.load(), 1u);
}

TEST_F(Retprobes, TheEntryIsJumpOptimisedWhereTheBytesAllow) {
  // pt_redzone starts with a 5-byte instruction: a window of one instruction.
  Calls c;
  retprobe(&pt_redzone, c);
  auto i = info_at(addr_of(&pt_redzone));
  ASSERT_TRUE(i);
  EXPECT_EQ(i->state, State::optimised) << i->not_optimised;
  for (uint64_t x = 0; x < 100; ++x) ASSERT_EQ(opaque(&pt_redzone)(x), 2 * x);
  EXPECT_EQ(c.entries.load(), 100u);
  EXPECT_EQ(c.returns.load(), 100u);
  EXPECT_EQ(c.last_ret.load(), 198);
}

// backtrace() from inside a hijacked frame: the walk ends at the trampoline (its return
// address is undefined in its unwind information) instead of wandering off.
extern "C" __attribute__((noinline)) int pt_backtrace_inside(int x) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  __asm__ volatile("" ::: "memory");
  return n + x * 0;
}

TEST_F(Retprobes, BacktracesFromInsideAHijackedFrameEndAtTheTrampoline) {
  const int without = opaque(&pt_backtrace_inside)(0);
  Calls c;
  retprobe(&pt_backtrace_inside, c);
  const int with = opaque(&pt_backtrace_inside)(0);
  EXPECT_GE(with, 2);  // backtrace itself's caller, and the hijacked frame
  EXPECT_LE(with, without);
  EXPECT_EQ(c.returns.load(), 1u);
}

TEST_F(Retprobes, OnlyAtAFunctionEntry) {
  errno = 0;
  EXPECT_EQ(utramp_retprobe_attach(at(&pt_jcc, 2), on_entry, on_return, 0, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(last_error().find("not a function's entry"), std::string::npos) << last_error();
  EXPECT_EQ(utramp_retprobe_attach(at(&pt_jcc), nullptr, nullptr, 0, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

utramp_probe* g_in_flight = nullptr;
long detach_in_flight(long x) {
  EXPECT_EQ(utramp_probe_detach(g_in_flight), 0) << last_error();
  return x * 10;
}

TEST_F(Retprobes, DetachWhileACallIsInFlightReturnsWithoutTheHandler) {
  Calls c;
  g_in_flight = utramp_retprobe_attach(at(&pt_call_cb), on_entry, on_return,
                                       reinterpret_cast<uint64_t>(&c), 0);
  ASSERT_NE(g_in_flight, nullptr) << last_error();
  // pt_call_cb's frame is hijacked when the callback detaches the probe.
  EXPECT_EQ(opaque(&pt_call_cb)(detach_in_flight, 4), 41);
  EXPECT_EQ(c.entries.load(), 1u);
  EXPECT_EQ(c.returns.load(), 0u);
  EXPECT_TRUE(Manager::instance().list().empty());
}

}  // namespace
