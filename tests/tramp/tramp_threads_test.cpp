// The thread registry (tramp/threads.cpp): entries of exited threads are released by one
// scan only. detach's snapshot_guard scans without the reclaimer's lock; were it to
// release entries too, it could clear the entry of a live thread:
//   1. the scan reads the entry of thread X, which has exited (block B, tid X);
//   2. the reclaimer's scan releases that entry; thread Y claims it, and with it the
//      block B (a block belongs to its entry and is reused by the next thread);
//   3. the first scan finds tid X gone and clears the entry: Y's.
// Y keeps its block pointer set, so it never registers again: its counters go unseen
// and reclamation could free an image it runs in. Here step 2 runs inside the scan hook.
// (X and Y also share one stack, pthread_attr_setstack, as glibc's stack cache arranges:
// their initial-exec TLS is at one address too.)
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "tramp/threads.hpp"

namespace {

using utramp::tramp::ThreadBlock;

constexpr size_t kStack = 1 << 20;

struct Seen {
  const ThreadBlock* block = nullptr;
  int tid = 0;
};

Seen g_x, g_y;
void* g_stack = nullptr;
std::atomic<bool> g_y_ready{false}, g_y_go{false}, g_hook_done{false};
pthread_t g_y_thread;

void* register_self(void* out) {
  utramp::tramp::utramp_register_thread();
  auto* s = static_cast<Seen*>(out);
  s->block = &utramp::tramp::this_thread_block();
  s->tid = static_cast<int>(syscall(SYS_gettid));
  return nullptr;
}

void* thread_y(void*) {
  register_self(&g_y);
  g_y_ready.store(true);
  while (!g_y_go.load()) usleep(1000);
  return nullptr;
}

bool start_on_stack(pthread_t* t, void* (*fn)(void*), void* arg) {
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setstack(&a, g_stack, kStack);
  const bool ok = pthread_create(t, &a, fn, arg) == 0;
  pthread_attr_destroy(&a);
  return ok;
}

// Step 2, inside the first scan, at X's entry.
void hook(const ThreadBlock* block, int tid) {
  if (block != g_x.block || tid != g_x.tid || g_hook_done.exchange(true)) return;
  (void)utramp::tramp::snapshot_counters({});  // the reclaimer's scan: releases X's entry
  if (!start_on_stack(&g_y_thread, thread_y, nullptr)) return;
  while (!g_y_ready.load()) usleep(1000);
}

bool registered(int tid) {
  const auto s = utramp::tramp::snapshot_counters({});
  return std::find(s.tids.begin(), s.tids.end(), tid) != s.tids.end();
}

TEST(TrampThreads, DetachScanNeverReleasesAnEntryANewThreadClaimed) {
  g_stack = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(g_stack, MAP_FAILED);
  (void)utramp::tramp::snapshot_counters({});  // release what earlier threads left
  pthread_t x;
  ASSERT_TRUE(start_on_stack(&x, register_self, &g_x));
  pthread_join(x, nullptr);  // X's entry stays until a releasing scan sees it gone

  utramp::tramp::set_scan_hook(hook);
  (void)utramp::tramp::snapshot_guard(0);  // detach's scan, step 1 and 3
  utramp::tramp::set_scan_hook(nullptr);

  ASSERT_TRUE(g_hook_done.load()) << "the scan never reached X's entry";
  ASSERT_TRUE(g_y_ready.load());
  ASSERT_EQ(g_y.block, g_x.block) << "Y did not get X's block with X's entry";
  EXPECT_TRUE(registered(g_y.tid)) << "Y's registry entry was released while Y runs";
  g_y_go.store(true);
  pthread_join(g_y_thread, nullptr);
  munmap(g_stack, kStack);
}

// Blocks are mapped per registry entry, not per thread: a thread that starts after
// another exited (and a releasing scan saw it gone) gets the dead thread's block back,
// zeroed, instead of a new mapping. A thread that starts and exits in a loop maps at
// most one block.
void* dirty_and_exit(void* out) {
  register_self(out);
  utramp::tramp::this_thread_block().counters[5] = 7;  // as if it died inside a stub
  utramp::tramp::this_thread_block().active[1] = 1;
  return nullptr;
}

// pthread_join returns once the thread cleared its tid, which can be before the kernel
// has released the task: the scan tells a thread gone by tgkill's ESRCH, so wait for it
// (a scan made before then rightly keeps the entry, and the next thread maps a block).
void wait_gone(int tid) {
  for (int i = 0; i < 5000; ++i) {
    if (syscall(SYS_tgkill, getpid(), tid, 0) != 0 && errno == ESRCH) return;
    usleep(1000);
  }
}

TEST(TrampThreads, ExitedThreadsBlocksAreReusedZeroed) {
  (void)utramp::tramp::snapshot_counters({});  // release what earlier threads left
  pthread_t t;
  Seen first;
  ASSERT_EQ(pthread_create(&t, nullptr, dirty_and_exit, &first), 0);
  pthread_join(t, nullptr);
  wait_gone(first.tid);
  const size_t mapped = utramp::tramp::mapped_blocks();
  for (int i = 0; i < 50; ++i) {
    (void)utramp::tramp::snapshot_counters({});  // sees the last one gone: releases it
    Seen s;
    ASSERT_EQ(pthread_create(&t, nullptr, dirty_and_exit, &s), 0);
    pthread_join(t, nullptr);
    ASSERT_NE(s.block, nullptr);
    wait_gone(s.tid);
  }
  EXPECT_EQ(utramp::tramp::mapped_blocks(), mapped) << "a block per thread instead of reuse";
  (void)utramp::tramp::snapshot_counters({});
  struct Check {
    uint32_t counter = 1;
    uint64_t guard = 1;
  } c;
  ASSERT_EQ(pthread_create(&t, nullptr,
                           [](void* out) -> void* {
                             utramp::tramp::utramp_register_thread();
                             auto* c = static_cast<Check*>(out);
                             c->counter = utramp::tramp::this_thread_block().counters[5];
                             c->guard = utramp::tramp::this_thread_block().active[1];
                             return nullptr;
                           },
                           &c),
            0);
  pthread_join(t, nullptr);
  EXPECT_EQ(c.counter, 0u) << "a reused block kept the dead thread's counter";
  EXPECT_EQ(c.guard, 0u) << "a reused block kept the dead thread's program guard";
}

// A forked child's thread keeps its block (the copy of its parent's, counters included:
// it may be inside stubs) and is registered in the child under its own tid.
TEST(TrampThreads, ForkedChildKeepsItsBlockAndIsRegistered) {
  utramp::tramp::utramp_register_thread();
  ThreadBlock& b = utramp::tramp::this_thread_block();
  b.counters[9] = 3;
  const pid_t child = fork();
  if (child == 0) {
    const int tid = static_cast<int>(syscall(SYS_gettid));
    const bool kept = &utramp::tramp::this_thread_block() == &b && b.counters[9] == 3;
    _exit(kept ? (registered(tid) ? 0 : 2) : 1);
  }
  b.counters[9] = 0;
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_NE(WEXITSTATUS(st), 1) << "the child's thread lost its block or its counters";
  EXPECT_NE(WEXITSTATUS(st), 2) << "the child's thread is not registered in the child";
}

// A signal handler that interrupts a thread's first registration and enters a stub
// registers the thread itself. The interrupted registration, resumed, must keep the
// handler's block (the handler may have left counters in it, by longjmp) and give its
// own entry back, so that the thread has one entry and one block.
std::atomic<int> g_hooked_tid{0};
const ThreadBlock* g_handler_block = nullptr;

void register_in_handler(int) {
  utramp::tramp::utramp_register_thread();
  g_handler_block = &utramp::tramp::this_thread_block();
}

void raise_once() {
  const int tid = static_cast<int>(syscall(SYS_gettid));
  int expected = tid;
  if (g_hooked_tid.compare_exchange_strong(expected, -tid)) raise(SIGUSR2);
}

void* interrupted_registration(void* out) {
  g_hooked_tid.store(static_cast<int>(syscall(SYS_gettid)));
  register_self(out);
  return nullptr;
}

TEST(TrampThreads, ARegistrationASignalHandlerBeatKeepsTheHandlersBlock) {
  struct sigaction sa {}, old{};
  sa.sa_handler = register_in_handler;
  ASSERT_EQ(sigaction(SIGUSR2, &sa, &old), 0);
  utramp::tramp::set_register_hook(raise_once);
  Seen s;
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, nullptr,
                           [](void* out) -> void* {
                             auto* seen = static_cast<Seen*>(out);
                             interrupted_registration(seen);
                             // Still running: counted while registered.
                             const auto snap = utramp::tramp::snapshot_counters({});
                             seen->tid = static_cast<int>(
                                 std::count(snap.tids.begin(), snap.tids.end(), seen->tid));
                             return nullptr;
                           },
                           &s),
            0);
  pthread_join(t, nullptr);
  utramp::tramp::set_register_hook(nullptr);
  sigaction(SIGUSR2, &old, nullptr);
  ASSERT_LT(g_hooked_tid.load(), 0) << "the hook never interrupted a registration";
  ASSERT_NE(g_handler_block, nullptr);
  EXPECT_EQ(s.block, g_handler_block) << "the interrupted registration replaced the handler's block";
  EXPECT_EQ(s.tid, 1) << "the thread is in the registry this many times";
}

}  // namespace
