// utramp_link_detach's guarantee: on return no program of the link runs any more, so
// the state it reads may be freed at once. Each case frees (or marks dead) the state
// right after detach and then lets the threads that were inside go on; programs near
// the image (call rel32) and far from it (in a shared library: call through a register)
// are both checked, as the images call them differently.
//
// The first attach of each function happens while the process has one thread, so the
// targets' five 1-byte NOPs are canonicalised (refused with threads running).
#include <gtest/gtest.h>
#include <utramp/utramp.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <ostream>
#include <string>
#include <thread>

#include "detach_targets.h"
#include "tramp_test_util.hpp"

namespace {

namespace ut = utramp::tramp;
using tramp_test::drain_retired;
using tramp_test::opaque;

void wait_for(const std::atomic<int>& flag) {
  while (!flag.load()) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

struct Progs {
  const char* where;
  utramp_prog_t count, block, inject;
  std::atomic<unsigned long>* dead_runs;
};
void PrintTo(const Progs& p, std::ostream* os) { *os << p.where; }
const Progs kNear{"near", &near_count, &near_block, &near_inject, &near_dead_runs};
const Progs kFar{"far", &far_count, &far_block, &far_inject, &far_dead_runs};

utramp_link* attach(void* func, utramp_attach_type type, utramp_prog_t prog, td_state* s,
                    const char* sig) {
  UTRAMP_OPTS(utramp_attach_opts, o, .cookie = reinterpret_cast<uint64_t>(s), .signature = sig);
  return utramp_attach(func, type, prog, &o);
}

// The far programs must really be out of rel32 reach of the images (near the targets),
// or the far cases test nothing new.
TEST(TrampDetach, FarProgramsAreOutOfRel32Reach) {
  const auto d = [](auto* a, auto* b) {
    const auto x = reinterpret_cast<uint64_t>(a), y = reinterpret_cast<uint64_t>(b);
    return x > y ? x - y : y - x;
  };
  EXPECT_GT(d(&td_sleepy, &far_count), uint64_t{1} << 32);
  EXPECT_LT(d(&td_sleepy, &near_count), uint64_t{1} << 30);
}

class Detach : public ::testing::TestWithParam<Progs> {};

// A thread asleep in the traced function when its fexit link is detached: detach does
// not wait for it, and when it returns through the image it entered, the program does
// not run (its state is freed by then). That image has been replaced twice meanwhile:
// retired images are covered as well as the live one.
TEST_P(Detach, ThreadAsleepInsideSkipsTheDetachedFexit) {
  const Progs& p = GetParam();
  ASSERT_TRUE(drain_retired());
  auto* s = new td_state{TD_LIVE, {0}, {0}, {0}, {0}};
  auto* other = new td_state{TD_LIVE, {0}, {0}, {0}, {0}};
  auto* l = attach(reinterpret_cast<void*>(&td_sleepy), UTRAMP_FEXIT, p.count, s,
                   "i32,ptr,ptr -> i32");
  ASSERT_NE(l, nullptr) << utramp_last_error();
  std::atomic<int> none{0}, inside{0}, release{0};
  EXPECT_EQ(opaque(&td_sleepy)(0, &none, &none), 40);
  EXPECT_EQ(s->runs.load(), 1u);

  const unsigned long dead0 = p.dead_runs->load();
  int result = 0;
  std::thread sleeper([&] { result = opaque(&td_sleepy)(1, &inside, &release); });
  wait_for(inside);
  // A second link: the sleeper's image is retired, a new one runs both programs.
  auto* l2 = attach(reinterpret_cast<void*>(&td_sleepy), UTRAMP_FENTRY, p.count, other,
                    "i32,ptr,ptr -> i32");
  ASSERT_NE(l2, nullptr) << utramp_last_error();
  EXPECT_EQ(opaque(&td_sleepy)(0, &none, &none), 40);
  EXPECT_EQ(s->runs.load(), 2u);
  EXPECT_EQ(other->runs.load(), 1u);

  ASSERT_EQ(utramp_link_detach(l), 0) << utramp_last_error();
  s->magic = TD_DEAD;  // what freed memory reads as without AddressSanitizer
  delete s;
  EXPECT_GE(ut::Manager::instance().retired(), 1u) << "the sleeper's image is kept";
  release = 1;
  sleeper.join();
  EXPECT_EQ(result, 41);
  EXPECT_EQ(p.dead_runs->load() - dead0, 0u) << "the detached program ran after detach";
  EXPECT_EQ(opaque(&td_sleepy)(0, &none, &none), 40);
  EXPECT_EQ(other->runs.load(), 2u) << "the other link still runs";
  ASSERT_EQ(utramp_link_detach(l2), 0) << utramp_last_error();
  delete other;
  EXPECT_TRUE(drain_retired());
}

// Manager::after_grace: what a detached link's program used (its code, counters in
// memory of its own) is freed only once the images it ran in are: not while a thread
// sleeps inside the function in an image that calls it, and soon after that thread left.
TEST(TrampDetach, AfterGraceWaitsForTheImagesRetiredBefore) {
  auto& m = ut::Manager::instance();
  ASSERT_TRUE(drain_retired());
  auto* s = new td_state{TD_LIVE, {0}, {0}, {0}, {0}};
  auto* l = attach(reinterpret_cast<void*>(&td_sleepy), UTRAMP_FEXIT, &near_count, s, "i32,ptr,ptr -> i32");
  ASSERT_NE(l, nullptr) << utramp_last_error();
  std::atomic<int> inside{0}, release{0};
  // Shared with the free: it may outlive a failed test.
  auto freed = std::make_shared<std::atomic<int>>(0), at_once = std::make_shared<std::atomic<int>>(0);
  int result = 0;
  std::thread sleeper([&] { result = opaque(&td_sleepy)(1, &inside, &release); });
  wait_for(inside);
  ASSERT_EQ(utramp_link_detach(l), 0) << utramp_last_error();
  m.after_grace([freed] { *freed = 1; });
  EXPECT_EQ(m.pending_frees(), 1u);
  for (int i = 0; i < 20; ++i) m.reclaim_now();
  EXPECT_EQ(freed->load(), 0) << "freed while a thread is in an image that ran the program";
  release = 1;
  sleeper.join();
  EXPECT_EQ(result, 41);
  EXPECT_TRUE(drain_retired());
  for (int i = 0; i < 1000 && !freed->load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(freed->load(), 1);
  EXPECT_EQ(m.pending_frees(), 0u);
  s->magic = TD_DEAD;
  delete s;
  // With nothing retired, the next reclamation runs it.
  m.after_grace([at_once] { *at_once = 1; });
  for (int i = 0; i < 1000 && !at_once->load(); ++i) {
    m.reclaim_now();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(at_once->load(), 1);
}

// A thread inside the program when it is detached: detach returns only after the
// program has returned.
TEST_P(Detach, WaitsForARunningProgram) {
  const Progs& p = GetParam();
  auto* s = new td_state{TD_LIVE, {0}, {0}, {0}, {0}};
  auto* l = attach(reinterpret_cast<void*>(&td_add), UTRAMP_FENTRY, p.block, s, "i64,i64 -> i64");
  ASSERT_NE(l, nullptr) << utramp_last_error();
  int64_t result = 0;
  std::thread caller([&] { result = opaque(&td_add)(20, 22); });
  wait_for(s->inside);
  std::atomic<int> detached{0};
  int rc = -1;
  int finished_at_return = -1;
  std::thread detacher([&] {
    rc = utramp_link_detach(l);
    finished_at_return = s->finished.load();
    detached = 1;
  });
  // No timing is asserted: whenever detach returns, the program must have finished.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(detached.load(), 0) << "detach returned while the program still runs";
  s->release = 1;
  detacher.join();
  caller.join();
  EXPECT_EQ(rc, 0) << utramp_last_error();
  EXPECT_EQ(finished_at_return, 1) << "detach returned before the program did";
  EXPECT_EQ(result, 42);
  s->magic = TD_DEAD;
  delete s;
}

// An fmod_ret program of an old image, reached after detach by a thread that was held
// in an fentry program before it: skipped as a program returning 0 would be, so the
// body runs (not the injected value, nor whatever a register held).
TEST_P(Detach, FmodRetOfAnOldImageIsSkippedAndTheBodyRuns) {
  const Progs& p = GetParam();
  auto* hold = new td_state{TD_LIVE, {0}, {0}, {0}, {0}};
  auto* inj = new td_state{TD_LIVE, {0}, {0}, {0}, {0}};
  auto* a = attach(reinterpret_cast<void*>(&td_check), UTRAMP_FENTRY, p.block, hold, "i32 -> i32");
  ASSERT_NE(a, nullptr) << utramp_last_error();
  auto* b = attach(reinterpret_cast<void*>(&td_check), UTRAMP_FMOD_RET, p.inject, inj, "i32 -> i32");
  ASSERT_NE(b, nullptr) << utramp_last_error();
  int result = 0;
  std::thread caller([&] { result = opaque(&td_check)(3); });
  wait_for(hold->inside);
  const unsigned long dead0 = p.dead_runs->load();
  ASSERT_EQ(utramp_link_detach(b), 0) << utramp_last_error();
  inj->magic = TD_DEAD;
  delete inj;
  hold->release = 1;
  caller.join();
  EXPECT_EQ(result, 7) << "the body must run: a disabled fmod_ret returns 0";
  EXPECT_EQ(p.dead_runs->load() - dead0, 0u);
  ASSERT_EQ(utramp_link_detach(a), 0) << utramp_last_error();
  hold->magic = TD_DEAD;
  delete hold;
  EXPECT_EQ(opaque(&td_check)(3), 7);
}

INSTANTIATE_TEST_SUITE_P(NearAndFar, Detach, ::testing::Values(kNear, kFar),
                         [](const auto& i) { return std::string(i.param.where); });

// ---- refusals from inside a program ------------------------------------------------

utramp_link* g_self_link;
std::atomic<int> g_self_rc, g_attach_errno;

uint64_t detaches_itself(uint64_t*) {
  g_self_rc = utramp_link_detach(g_self_link);
  errno = 0;
  g_attach_errno = utramp_attach(reinterpret_cast<void*>(&td_check), UTRAMP_FENTRY,
                                 &detaches_itself, nullptr) == nullptr
                       ? errno
                       : 0;
  return 0;
}

// Detach (or attach) from inside a program would wait for the thread it runs on, or for
// a lock the code it interrupted holds: refused with EBUSY, and the link stays.
TEST(TrampDetach, FromInsideAProgramIsRefused) {
  UTRAMP_OPTS(utramp_attach_opts, o, .signature = "i64,i64 -> i64");
  g_self_link = utramp_attach(reinterpret_cast<void*>(&td_add), UTRAMP_FENTRY, &detaches_itself, &o);
  ASSERT_NE(g_self_link, nullptr) << utramp_last_error();
  EXPECT_EQ(opaque(&td_add)(1, 2), 3);
  EXPECT_EQ(g_self_rc.load(), -EBUSY);
  EXPECT_EQ(g_attach_errno.load(), EBUSY);
  UTRAMP_OPTS(utramp_link_info, info);
  EXPECT_EQ(utramp_link_get_info(g_self_link, &info), 0) << "the link must still be attached";
  ASSERT_EQ(utramp_link_detach(g_self_link), 0) << utramp_last_error();
}

}  // namespace
