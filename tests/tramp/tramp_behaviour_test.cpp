// The trampoline against the kernel's own behaviours (DESIGN §5): the per-program
// recursion guard, detach that never waits for a sleeping thread, exceptions unwinding
// through images, deep recursion, fork, and run statistics.
//
// Every test asserts what happened, never how long it took. The first attach of each
// test happens while the process has one thread, so the targets' five 1-byte NOPs are
// canonicalised (that is refused with threads running).
#include <gtest/gtest.h>
#include <signal.h>
#include <setjmp.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utramp/utramp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "behaviour_targets.h"
#include "tramp/threads.hpp"
#include "tramp/trampoline.hpp"
#include "tramp_test_util.hpp"

namespace {

namespace ut = utramp::tramp;
using Prog = uint64_t (*)(uint64_t*);
using tramp_test::drain_retired;
using tramp_test::opaque;

utramp_link* attach(void* func, utramp_attach_type type, Prog prog, const char* sig) {
  utramp_attach_opts o{sizeof o, 0, sig};
  return utramp_attach(func, type, prog, &o);
}
template <class F>
utramp_link* attach(F* func, utramp_attach_type type, Prog prog, const char* sig) {
  return attach(reinterpret_cast<void*>(func), type, prog, sig);
}

// The first live link running `prog` (links of one program share its counters).
std::optional<ut::LinkInfo> info_of(Prog prog) {
  for (const auto& t : ut::Manager::instance().list())
    for (const auto& l : t.links)
      if (l.prog == reinterpret_cast<uint64_t>(prog)) return l;
  return std::nullopt;
}
uint64_t misses_of(Prog prog) {
  auto i = info_of(prog);
  return i ? i->misses : ~uint64_t{0};
}

// This thread's counters (site windows and images) summed: zero whenever the thread is
// inside no stub and no image.
uint64_t my_counters() {
  uint64_t n = 0;
  for (uint32_t c : ut::this_thread_block().counters) n += c;
  return n;
}

// ---- 1. The recursion guard ---------------------------------------------------------

std::atomic<int> g_self_runs, g_observer_runs;

uint64_t calls_itself(uint64_t* ctx) {
  ++g_self_runs;
  if (ctx[0] == 1) opaque(&tb_self)(2);  // re-enters the traced function
  return 0;
}
uint64_t observer(uint64_t*) {
  ++g_observer_runs;
  return 0;
}

// A program that calls the function it traces: the nested call runs the body but not
// the program again (a miss), as the kernel's bpf_prog_active guard does. Another
// program on the same function is not running, so it runs in the nested call too.
TEST(TrampBehaviour, ProgramCallingItsOwnFunctionIsAMissNotRecursion) {
  auto* p = attach(&tb_self, UTRAMP_FENTRY, &calls_itself, "i32 -> i32");
  ASSERT_NE(p, nullptr) << utramp_last_error();
  auto* q = attach(&tb_self, UTRAMP_FENTRY, &observer, "i32 -> i32");
  ASSERT_NE(q, nullptr) << utramp_last_error();
  // A program's counters outlive its links: count from here.
  const int body0 = tb_self_body, runs0 = g_self_runs, obs0 = g_observer_runs;
  const uint64_t miss0 = misses_of(&calls_itself), obs_miss0 = misses_of(&observer);

  EXPECT_EQ(opaque(&tb_self)(1), 2);
  EXPECT_EQ(tb_self_body - body0, 2) << "outer call and the program's call";
  EXPECT_EQ(g_self_runs - runs0, 1) << "the program must not recurse into itself";
  EXPECT_EQ(g_observer_runs - obs0, 2) << "the other program runs in both calls";
  EXPECT_EQ(misses_of(&calls_itself) - miss0, 1u);
  EXPECT_EQ(misses_of(&observer) - obs_miss0, 0u);

  // A call that does not re-enter: no new miss.
  EXPECT_EQ(opaque(&tb_self)(5), 6);
  EXPECT_EQ(tb_self_body - body0, 3);
  EXPECT_EQ(g_self_runs - runs0, 2);
  EXPECT_EQ(g_observer_runs - obs0, 3);
  EXPECT_EQ(misses_of(&calls_itself) - miss0, 1u);

  ASSERT_EQ(utramp_link_detach(p), 0);
  ASSERT_EQ(utramp_link_detach(q), 0);
  EXPECT_EQ(my_counters(), 0u);
}

std::atomic<int> g_sig_runs;
std::atomic<int> g_handler_runs, g_handler_result;  // lock-free: fine in a handler

void call_tb_sig_handler(int) {
  g_handler_result = opaque(&tb_sig)(3);
  ++g_handler_runs;
}
uint64_t raises_signal(uint64_t* ctx) {
  ++g_sig_runs;
  if (ctx[0] == 1) raise(SIGUSR1);  // delivered to this thread before raise returns
  return 0;
}

// A signal handler that interrupts the program on the same thread and calls the traced
// function: the program is active on this thread, so that run is a miss.
TEST(TrampBehaviour, ProgramInterruptedBySignalHandlerCallingTheFunctionIsAMiss) {
  struct sigaction sa, old;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = call_tb_sig_handler;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  auto* p = attach(&tb_sig, UTRAMP_FENTRY, &raises_signal, "i32 -> i32");
  ASSERT_NE(p, nullptr) << utramp_last_error();
  const int body0 = tb_sig_body, handled0 = g_handler_runs, runs0 = g_sig_runs;
  const uint64_t miss0 = misses_of(&raises_signal);
  g_handler_result = 0;

  EXPECT_EQ(opaque(&tb_sig)(1), 2);
  EXPECT_EQ(g_handler_runs - handled0, 1);
  EXPECT_EQ(g_handler_result.load(), 4) << "the handler's call ran the body";
  EXPECT_EQ(tb_sig_body - body0, 2);
  EXPECT_EQ(g_sig_runs - runs0, 1);
  EXPECT_EQ(misses_of(&raises_signal) - miss0, 1u);

  // The same handler outside the program: the program is not active, so it runs.
  raise(SIGUSR1);
  EXPECT_EQ(g_handler_runs - handled0, 2);
  EXPECT_EQ(g_sig_runs - runs0, 2);
  EXPECT_EQ(misses_of(&raises_signal) - miss0, 1u);

  ASSERT_EQ(utramp_link_detach(p), 0);
  ASSERT_EQ(sigaction(SIGUSR1, &old, nullptr), 0);
  EXPECT_EQ(my_counters(), 0u);
}

// ---- 2. Detach while a thread sleeps inside an fexit image ------------------------------

std::atomic<int> g_sleepy_exits;
std::atomic<uint64_t> g_sleepy_ret;

uint64_t sleepy_exit(uint64_t* ctx) {
  ++g_sleepy_exits;
  g_sleepy_ret = ctx[3];  // "i32,ptr,ptr -> i32": the return value follows 3 arguments
  return 0;
}

// Releases a stuck test instead of hanging it: fires only if detach blocks on the sleeper.
class Watchdog {
 public:
  explicit Watchdog(std::atomic<int>& release)
      : th_([this, &release] {
          std::unique_lock lock(mu_);
          if (!cv_.wait_for(lock, std::chrono::seconds(60), [&] { return done_; })) {
            fired_ = true;
            release = 1;
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    th_.join();
  }
  bool fired() {
    std::lock_guard lock(mu_);
    return fired_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, fired_ = false;
  std::thread th_;
};

// Detach takes effect at once and never waits for a thread sleeping inside the traced
// function: the thread finishes in the image it entered, where the detached fexit
// program no longer runs (detach's guarantee: tramp_detach_test.cpp), calls made after
// detach do not run it, and that image is freed only after the thread has left it.
sigjmp_buf g_left_jb;
std::atomic<int> g_left_runs;
void leave_by_longjmp(int) { siglongjmp(g_left_jb, 1); }
uint64_t left_by_handler(uint64_t* ctx) {
  ++g_left_runs;
  if (ctx[0] == 1) raise(SIGUSR2);  // its handler siglongjmps out of this program
  return 0;
}

// A signal handler that leaves the program by siglongjmp: the program's guard stays
// held by a run that will never finish. The next call, above that run on the stack,
// takes the guard over and runs the program (it used to miss for good). In a child:
// the jump also leaves the site's counter held on that thread (nothing releases it on
// a longjmp), so the images of that site are never reclaimed there — safe, but the
// other tests expect every retired image to be freed.
TEST(TrampBehaviour, ProgramLeftBySignalHandlersLongjmpRunsAgain) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = leave_by_longjmp;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR2, &sa, nullptr) != 0) _exit(10);
    auto* p = attach(&tb_sig, UTRAMP_FENTRY, &left_by_handler, "i32 -> i32");
    if (!p) _exit(11);
    const int runs0 = g_left_runs;
    const uint64_t miss0 = misses_of(&left_by_handler);
    volatile bool jumped = false;
    if (sigsetjmp(g_left_jb, 1) == 0) opaque(&tb_sig)(1);
    else jumped = true;
    if (!jumped || g_left_runs - runs0 != 1) _exit(12);
    for (int i = 0; i < 3; ++i)
      if (opaque(&tb_sig)(2) != 3) _exit(13);
    if (g_left_runs - runs0 != 4) _exit(14);  // the program ran again after it was left
    if (misses_of(&left_by_handler) != miss0) _exit(15);
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st)) << "child status " << st;
  EXPECT_EQ(WEXITSTATUS(st), 0) << "10-11: set-up, 12: no jump, 13: wrong result, "
                                   "14: the program did not run again, 15: it missed";
}

TEST(TrampBehaviour, DetachDoesNotWaitForThreadSleepingInsideFexit) {
  auto& m = ut::Manager::instance();
  ASSERT_TRUE(drain_retired());
  std::atomic<int> inside{0}, release{0}, returned{0}, may_exit{0}, none{0};
  auto* l = attach(&tb_sleepy, UTRAMP_FEXIT, &sleepy_exit, "i32,ptr,ptr -> i32");
  ASSERT_NE(l, nullptr) << utramp_last_error();
  const int exits0 = g_sleepy_exits;
  EXPECT_EQ(opaque(&tb_sleepy)(0, &none, &none), 40);
  EXPECT_EQ(g_sleepy_exits - exits0, 1);

  int result = 0;
  std::thread sleeper([&] {
    result = opaque(&tb_sleepy)(1, &inside, &release);
    returned = 1;
    while (!may_exit) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (!inside) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  {
    Watchdog dog(release);
    ASSERT_EQ(utramp_link_detach(l), 0) << utramp_last_error();
    EXPECT_FALSE(dog.fired()) << "detach waited for the sleeping thread";
    EXPECT_EQ(returned.load(), 0) << "detach returned while the thread is still inside";

    // Calls made after detach do not run the program.
    EXPECT_EQ(opaque(&tb_sleepy)(0, &none, &none), 40);
    EXPECT_EQ(g_sleepy_exits - exits0, 1);

    // The image the sleeper will return into is kept.
    EXPECT_GE(m.retired(), 1u);
    for (int i = 0; i < 5; ++i) m.reclaim_now();
    EXPECT_GE(m.retired(), 1u) << "an image a thread is inside was freed";

    // A new image while the old one is held: the process stays healthy.
    auto* l2 = attach(&tb_sleepy, UTRAMP_FEXIT, &sleepy_exit, "i32,ptr,ptr -> i32");
    ASSERT_NE(l2, nullptr) << utramp_last_error();
    EXPECT_EQ(opaque(&tb_sleepy)(0, &none, &none), 40);
    EXPECT_EQ(g_sleepy_exits - exits0, 2);
    EXPECT_EQ(g_sleepy_ret.load(), 40u);
    ASSERT_EQ(utramp_link_detach(l2), 0);
    for (int i = 0; i < 5; ++i) m.reclaim_now();
    EXPECT_GE(m.retired(), 1u);
    EXPECT_EQ(returned.load(), 0);
    EXPECT_FALSE(dog.fired());
    release = 1;
  }
  while (!returned) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(result, 41);
  EXPECT_EQ(g_sleepy_exits - exits0, 2) << "a program ran after its link was detached";
  EXPECT_EQ(g_sleepy_ret.load(), 40u);
  // The sleeper is alive but outside: its counters no longer hold the image.
  EXPECT_TRUE(drain_retired()) << m.retired() << " images still retired";
  may_exit = 1;
  sleeper.join();
}

// ---- 4. Exceptions through images ---------------------------------------------------------

std::atomic<int> g_exc_entries, g_exc_exits;
uint64_t exc_entry(uint64_t*) {
  ++g_exc_entries;
  return 0;
}
uint64_t exc_exit(uint64_t*) {
  ++g_exc_exits;
  return 0;
}

// A C++ exception thrown by the traced function (or a callee) unwinds through the image
// to the caller's catch. Like the kernel's fexit, the fexit program does not run for a
// call that does not return normally. The image's unwind personality releases the
// thread's counter, so the image is reclaimed after detach while the thread lives on.
void exceptions_through(bool fentry, bool fexit) {
  auto& m = ut::Manager::instance();
  ASSERT_TRUE(drain_retired());
  std::vector<utramp_link*> links;
  for (auto* f : {&tb_throw, &tb_throw_deep}) {
    if (fentry) links.push_back(attach(f, UTRAMP_FENTRY, &exc_entry, "i32 -> i32"));
    if (fexit) links.push_back(attach(f, UTRAMP_FEXIT, &exc_exit, "i32 -> i32"));
  }
  for (auto* l : links) ASSERT_NE(l, nullptr) << utramp_last_error();
  const int e0 = g_exc_entries, x0 = g_exc_exits;

  EXPECT_EQ(opaque(&tb_throw)(4), 8);
  EXPECT_EQ(opaque(&tb_throw_deep)(4), 15);
  EXPECT_EQ(g_exc_entries - e0, fentry ? 2 : 0);
  EXPECT_EQ(g_exc_exits - x0, fexit ? 2 : 0);

  constexpr int kThrows = 5;
  int caught = 0;
  for (int i = 0; i < kThrows; ++i) {
    try {
      opaque(&tb_throw)(-7 - i);
    } catch (const TbError& e) {
      EXPECT_EQ(e.value, -7 - i);
      ++caught;
    }
    try {
      opaque(&tb_throw_deep)(-1);
    } catch (const std::invalid_argument& e) {
      EXPECT_STREQ(e.what(), "negative");
      ++caught;
    }
    EXPECT_EQ(my_counters(), 0u) << "the unwind left a counter held";
  }
  EXPECT_EQ(caught, 2 * kThrows);
  EXPECT_EQ(g_exc_entries - e0, fentry ? 2 + 2 * kThrows : 0);
  EXPECT_EQ(g_exc_exits - x0, fexit ? 2 : 0) << "fexit does not run for a throwing call";

  // The same from another thread that stays alive through detach and reclamation.
  std::atomic<int> thrown{0}, may_exit{0};
  std::thread other([&] {
    for (int i = 0; i < kThrows; ++i) {
      try {
        opaque(&tb_throw)(-1);
      } catch (const TbError&) {
        ++thrown;
      }
    }
    while (!may_exit) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (thrown < kThrows) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(g_exc_exits - x0, fexit ? 2 : 0);

  // Still working after the unwinds.
  EXPECT_EQ(opaque(&tb_throw)(1), 2);
  EXPECT_EQ(g_exc_exits - x0, fexit ? 3 : 0);
  for (auto* l : links) ASSERT_EQ(utramp_link_detach(l), 0);
  EXPECT_TRUE(drain_retired()) << m.retired() << " images still retired: a counter leaked";
  may_exit = 1;
  other.join();
  EXPECT_EQ(opaque(&tb_throw)(1), 2);
}

TEST(TrampBehaviour, ExceptionThroughFentryIsCaughtByCaller) { exceptions_through(true, false); }
TEST(TrampBehaviour, ExceptionThroughFexitIsCaughtAndFexitDoesNotRun) {
  exceptions_through(false, true);
}
TEST(TrampBehaviour, ExceptionThroughFentryAndFexit) { exceptions_through(true, true); }

// ---- 5. Recursion --------------------------------------------------------------------------

std::atomic<int> g_rec_entries, g_rec_exits;
std::atomic<uint64_t> g_rec_arg_sum, g_rec_ret_sum;

uint64_t rec_entry(uint64_t* ctx) {
  ++g_rec_entries;
  g_rec_arg_sum += ctx[0];
  return 0;
}
uint64_t rec_exit(uint64_t* ctx) {
  ++g_rec_exits;
  g_rec_ret_sum += ctx[1];  // "i32 -> i32": the return value follows the argument
  return 0;
}

// Each level of a recursive function is a separate call: both programs run at every
// level (neither is active while the body runs), and the fexit program sees each
// level's own return value.
TEST(TrampBehaviour, RecursiveFunctionCountsEveryLevel) {
  auto* a = attach(&tb_rec, UTRAMP_FENTRY, &rec_entry, "i32 -> i32");
  ASSERT_NE(a, nullptr) << utramp_last_error();
  auto* b = attach(&tb_rec, UTRAMP_FEXIT, &rec_exit, "i32 -> i32");
  ASSERT_NE(b, nullptr) << utramp_last_error();

  const int entries0 = g_rec_entries, exits0 = g_rec_exits;
  const uint64_t args0 = g_rec_arg_sum, rets0 = g_rec_ret_sum;
  const uint64_t miss0 = misses_of(&rec_entry) + misses_of(&rec_exit);

  constexpr uint64_t kDepth = 1000;
  EXPECT_EQ(opaque(&tb_rec)(int(kDepth)), int(kDepth * (kDepth + 1) / 2));
  EXPECT_EQ(g_rec_entries - entries0, int(kDepth + 1));
  EXPECT_EQ(g_rec_exits - exits0, int(kDepth + 1));
  EXPECT_EQ(g_rec_arg_sum - args0, kDepth * (kDepth + 1) / 2);
  uint64_t want = 0;  // sum over levels k of k(k+1)/2
  for (uint64_t k = 0; k <= kDepth; ++k) want += k * (k + 1) / 2;
  EXPECT_EQ(g_rec_ret_sum - rets0, want);
  EXPECT_EQ(misses_of(&rec_entry) + misses_of(&rec_exit), miss0);
  EXPECT_EQ(my_counters(), 0u);

  // Deeper: ten times the frames, each level inside its own image frame.
  constexpr int kDeep = 10000;
  const int e0 = g_rec_entries, x0 = g_rec_exits;
  EXPECT_EQ(opaque(&tb_rec)(kDeep), kDeep * (kDeep + 1) / 2);
  EXPECT_EQ(g_rec_entries - e0, kDeep + 1);
  EXPECT_EQ(g_rec_exits - x0, kDeep + 1);
  EXPECT_EQ(my_counters(), 0u);

  ASSERT_EQ(utramp_link_detach(a), 0);
  ASSERT_EQ(utramp_link_detach(b), 0);
  EXPECT_EQ(opaque(&tb_rec)(10), 55);
  EXPECT_EQ(g_rec_entries - e0, kDeep + 1);
}

// ---- 6. fork -----------------------------------------------------------------------------

std::atomic<int> g_fork_entries, g_fork_exits;
std::atomic<uint64_t> g_fork_arg, g_fork_ret;
uint64_t fork_entry(uint64_t* ctx) {
  ++g_fork_entries;
  g_fork_arg = ctx[0];
  return 0;
}
uint64_t fork_exit(uint64_t* ctx) {
  ++g_fork_exits;
  g_fork_ret = ctx[1];
  return 0;
}

// The child inherits the patched code, the images and its thread's state: the programs
// run in the child, on the child's memory; the parent sees none of it.
TEST(TrampBehaviour, ForkedChildRunsProgramsParentUnaffected) {
  auto* a = attach(&tb_forked, UTRAMP_FENTRY, &fork_entry, "i32 -> i32");
  ASSERT_NE(a, nullptr) << utramp_last_error();
  auto* b = attach(&tb_forked, UTRAMP_FEXIT, &fork_exit, "i32 -> i32");
  ASSERT_NE(b, nullptr) << utramp_last_error();
  g_fork_entries = 0;
  g_fork_exits = 0;
  EXPECT_EQ(opaque(&tb_forked)(2), 6);
  ASSERT_EQ(g_fork_entries.load(), 1);
  ASSERT_EQ(g_fork_exits.load(), 1);

  const pid_t pid = fork();
  ASSERT_GE(pid, 0) << strerror(errno);
  if (pid == 0) {
    // The child: no gtest here, an exit code per failed check.
    if (opaque(&tb_forked)(5) != 15) _exit(10);
    if (g_fork_entries != 2 || g_fork_arg != 5) _exit(11);
    if (g_fork_exits != 2 || g_fork_ret != 15) _exit(12);
    for (int i = 0; i < 100; ++i)
      if (opaque(&tb_forked)(i) != 3 * i) _exit(13);
    if (g_fork_entries != 102 || g_fork_exits != 102) _exit(14);
    if (my_counters() != 0) _exit(15);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died: status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child check failed (see the exit codes)";

  // The parent's counters saw nothing of the child.
  EXPECT_EQ(g_fork_entries.load(), 1);
  EXPECT_EQ(opaque(&tb_forked)(3), 9);
  EXPECT_EQ(g_fork_entries.load(), 2);
  EXPECT_EQ(g_fork_exits.load(), 2);
  EXPECT_EQ(g_fork_ret.load(), 9u);
  ASSERT_EQ(utramp_link_detach(a), 0);
  ASSERT_EQ(utramp_link_detach(b), 0);
  EXPECT_EQ(opaque(&tb_forked)(3), 9);
  EXPECT_EQ(g_fork_entries.load(), 2);
}

// ---- 7. Statistics -----------------------------------------------------------------------

std::atomic<int> g_stats_runs, g_stats_exit_runs;

// Runs until the monotonic clock has moved, so each run takes a measurable time.
uint64_t stats_prog(uint64_t*) {
  timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  do clock_gettime(CLOCK_MONOTONIC, &b);
  while (a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec);
  ++g_stats_runs;
  return 0;
}
uint64_t stats_exit(uint64_t*) {
  ++g_stats_exit_runs;
  return 0;
}

// Like kernel.bpf_stats_enabled: run count and run time per program only while
// statistics are on.
TEST(TrampBehaviour, StatisticsCountOnlyWhileOn) {
  utramp_set_stats(0);
  auto* a = attach(&tb_stats, UTRAMP_FENTRY, &stats_prog, "i32 -> i32");
  ASSERT_NE(a, nullptr) << utramp_last_error();
  // A program's statistics outlive its links: count from here.
  const auto start = *info_of(&stats_prog);
  const int runs0 = g_stats_runs;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(opaque(&tb_stats)(i), i ^ 0x55);
  EXPECT_EQ(g_stats_runs - runs0, 3);
  EXPECT_EQ(info_of(&stats_prog)->run_cnt, start.run_cnt);
  EXPECT_EQ(info_of(&stats_prog)->run_ns, start.run_ns);

  utramp_set_stats(1);
  uint64_t ns = start.run_ns;
  for (uint64_t i = 1; i <= 5; ++i) {
    EXPECT_EQ(opaque(&tb_stats)(1), 1 ^ 0x55);
    const auto info = info_of(&stats_prog);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->run_cnt - start.run_cnt, i);
    EXPECT_GT(info->run_ns, ns) << "each run takes time";
    ns = info->run_ns;
  }
  // A link attached while statistics are on counts too.
  auto* b = attach(&tb_stats, UTRAMP_FEXIT, &stats_exit, "i32 -> i32");
  ASSERT_NE(b, nullptr) << utramp_last_error();
  const uint64_t exit_cnt0 = info_of(&stats_exit)->run_cnt;
  EXPECT_EQ(opaque(&tb_stats)(2), 2 ^ 0x55);
  EXPECT_EQ(info_of(&stats_exit)->run_cnt - exit_cnt0, 1u);
  EXPECT_EQ(info_of(&stats_prog)->run_cnt - start.run_cnt, 6u);

  utramp_set_stats(0);
  const auto before = *info_of(&stats_prog);
  const int runs = g_stats_runs;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(opaque(&tb_stats)(i), i ^ 0x55);
  EXPECT_EQ(g_stats_runs - runs, 3) << "the program still runs";
  EXPECT_EQ(info_of(&stats_prog)->run_cnt, before.run_cnt);
  EXPECT_EQ(info_of(&stats_prog)->run_ns, before.run_ns);
  EXPECT_EQ(info_of(&stats_exit)->run_cnt - exit_cnt0, 1u);
  ASSERT_EQ(utramp_link_detach(a), 0);
  ASSERT_EQ(utramp_link_detach(b), 0);
}

}  // namespace
