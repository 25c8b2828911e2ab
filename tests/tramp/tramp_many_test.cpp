// More traced functions than thread counter slots (tramp/threads.hpp): each trampoline
// guards its stub window with a counter slot and each image that calls the original
// with another, and a tracer of every function of a large program (or of libc, with
// `record --libs`) needs thousands. Once every slot is taken, new owners share one: a
// thread's count then covers all of its owners, so reclamation waits for all of them
// (later, never earlier). Attach fexit to 3000 functions, call them from two threads,
// detach, and attach again.
#include <gtest/gtest.h>
#include <utramp/utramp.h>

#include <atomic>
#include <thread>
#include <vector>

extern "C" long (*const mf_table[3000])(long);

namespace {

constexpr size_t kFuncs = 3000;
std::atomic<uint64_t> g_runs{0}, g_sum{0};

uint64_t count_exit(uint64_t* ctx) {
  g_runs.fetch_add(1, std::memory_order_relaxed);
  g_sum.fetch_add(ctx[1], std::memory_order_relaxed);  // the return value
  return 0;
}

// Calls every function once; the sum of their results.
uint64_t call_all() {
  uint64_t s = 0;
  for (size_t i = 0; i < kFuncs; ++i) s += static_cast<uint64_t>(mf_table[i](static_cast<long>(i)));
  return s;
}

std::vector<utramp_link*> attach_all() {
  UTRAMP_OPTS(utramp_attach_opts, o, .signature = "i64 -> i64");
  std::vector<utramp_attach_req> reqs(kFuncs);
  for (size_t i = 0; i < kFuncs; ++i)
    reqs[i] = {reinterpret_cast<void*>(mf_table[i]), UTRAMP_FEXIT, &count_exit, &o, nullptr, 0};
  const int made = utramp_attach_batch(reqs.data(), reqs.size());
  EXPECT_EQ(made, static_cast<int>(kFuncs)) << utramp_last_error();
  std::vector<utramp_link*> links;
  for (const auto& r : reqs)
    if (r.link) links.push_back(r.link);
  return links;
}

TEST(TrampMany, MoreFunctionsThanCounterSlots) {
  for (int round = 0; round < 2; ++round) {
    auto links = attach_all();
    ASSERT_EQ(links.size(), kFuncs) << "round " << round;
    g_runs = 0;
    g_sum = 0;
    uint64_t expect = 0;
    std::thread other([&] { expect = call_all(); });
    const uint64_t mine = call_all();
    other.join();
    EXPECT_EQ(mine, expect);
    EXPECT_EQ(g_runs.load(), 2 * kFuncs) << "round " << round;
    EXPECT_EQ(g_sum.load(), 2 * mine) << "round " << round;
    for (utramp_link* l : links) ASSERT_EQ(utramp_link_detach(l), 0) << utramp_last_error();
    g_runs = 0;
    call_all();
    EXPECT_EQ(g_runs.load(), 0u) << "a program ran after its detach";
  }
}

}  // namespace
