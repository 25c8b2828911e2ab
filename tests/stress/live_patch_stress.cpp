// Live patching under load: threads call patched functions in tight loops while another
// thread toggles every site between its NOP and a call into a counting stub, and a
// third samples /proc/self/maps for writable+executable pages.
//
// Checked: no crash; every call runs its function's body exactly once with its
// arguments intact; each stub's count never exceeds its function's calls and is exact
// across fully-enabled and fully-disabled phases; no page is ever W+X; every site ends
// with its canonical NOP.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "arch/arch.hpp"
#include "os/exec_memory.hpp"
#include "os/maps.hpp"
#include "os/text_writer.hpp"
#include "patch/patcher.hpp"
#include "sites/table.hpp"

extern "C" {
extern uint64_t stress_body_runs[];
typedef uint64_t (*stress_fn)(uint64_t, uint64_t);
extern stress_fn stress_fns[];
}

namespace {

using namespace utramp;

constexpr int kFns = 128;
constexpr int kCallers = 4;
// Batches that toggle every site. Under AddressSanitizer each batch costs ~4 times as
// much (46 s for 10,000 on 2 shared cores), so it runs fewer; the race windows per batch
// are the same.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kToggles = 3000;
#else
constexpr int kToggles = 10000;
#endif

struct Stub {
  sites::Site* site = nullptr;
  os::ExecBlock block;
  uint64_t counter = 0;  // incremented by the generated stub
};

uint64_t load(const uint64_t& v) { return __atomic_load_n(&v, __ATOMIC_ACQUIRE); }

class LivePatchStress : public ::testing::Test {
 protected:
  void SetUp() override {
    // Canonicalise before any other thread exists: gcc's five 1-byte NOPs need it.
    auto n = os::thread_count();
    ASSERT_TRUE(n.ok());
    ASSERT_EQ(*n, 1u) << "the test must start single-threaded";
    auto& t = sites::SiteTable::instance();
    ASSERT_TRUE(t.discover().ok());
    auto left = t.canonicalize(sites::Quiescence::live);
    ASSERT_TRUE(left.ok()) << left.error().message;
    stubs_.resize(kFns);
    for (int i = 0; i < kFns; ++i) {
      Stub& s = stubs_[i];
      s.site = t.find(reinterpret_cast<uint64_t>(stress_fns[i]));
      ASSERT_NE(s.site, nullptr) << "no site for stress_fn_" << i;
      std::string why;
      ASSERT_TRUE(s.site->usable(&why)) << why;
      ASSERT_EQ(0, memcmp(reinterpret_cast<void*>(s.site->addr()), arch::kNop5.data(), 5));
      const auto w = arch::rel32_window(s.site->addr());
      auto b = os::ExecArena::instance().allocate(32, w.lo, w.hi);
      ASSERT_TRUE(b.ok()) << b.error().message;
      s.block = *b;
      auto code = arch::emit_counting_stub(b->addr, reinterpret_cast<uint64_t>(&s.counter));
      ASSERT_TRUE(code.ok()) << code.error().message;
      ASSERT_TRUE(os::ExecArena::instance().write(*b, 0, *code).ok());
    }
  }

  void TearDown() override {
    set_all(false);
    for (auto& s : stubs_) os::ExecArena::instance().free(s.block);
  }

  void set_all(bool on) {
    auto& t = sites::SiteTable::instance();
    for (auto& s : stubs_) {
      if (!s.site) continue;
      sites::SiteState st = on ? sites::SiteState{sites::SiteOp::call, s.block.addr}
                               : sites::SiteState{};
      auto r = t.set_desired(s.site, st);
      ASSERT_TRUE(r.ok()) << r.error().message;
    }
    auto r = t.commit();
    ASSERT_TRUE(r.ok()) << r.error().message;
  }

  std::vector<Stub> stubs_;
};

TEST_F(LivePatchStress, ToggleAllSitesWhileThreadsCall) {
  std::atomic<bool> stop{false};
  std::atomic<int> bad_results{0};
  std::vector<std::vector<uint64_t>> calls(kCallers, std::vector<uint64_t>(kFns, 0));
  std::vector<uint64_t> body_before(kFns);
  for (int i = 0; i < kFns; ++i) body_before[i] = load(stress_body_runs[i]);

  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&, c] {
      uint64_t x = static_cast<uint64_t>(c) * 1000003;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < kFns; ++i) {
          ++x;
          const uint64_t y = x ^ 0x5555;
          if (stress_fns[i](x, y) != x * 3 + y + static_cast<uint64_t>(i)) bad_results.fetch_add(1);
          ++calls[c][i];
        }
      }
    });

  std::atomic<int> wx_pages{0};
  std::atomic<int> samples{0};
  std::thread sampler([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      auto maps = os::read_maps();
      if (!maps.ok()) continue;
      for (const auto& m : *maps)
        if (m.w && m.x) wx_pages.fetch_add(1);
      samples.fetch_add(1);
    }
  });

  const auto stats0 = patch::stats();
  for (int k = 0; k < kToggles; ++k) {
    set_all(k % 2 == 0);
    if (HasFatalFailure()) break;
  }
  stop = true;
  for (auto& t : callers) t.join();
  sampler.join();
  const auto stats1 = patch::stats();

  EXPECT_EQ(bad_results.load(), 0) << "a call returned a wrong value: arguments were clobbered";
  EXPECT_EQ(wx_pages.load(), 0) << "a writable and executable mapping was seen";
  EXPECT_GT(samples.load(), 0);
  EXPECT_EQ(stats1.traps_forwarded, stats0.traps_forwarded);
  EXPECT_EQ(stats1.syncs - stats0.syncs, 3u * kToggles) << "one batch must cost 3 syncs";
  uint64_t total_calls = 0, total_stub = 0;
  for (int i = 0; i < kFns; ++i) {
    uint64_t n = 0;
    for (int c = 0; c < kCallers; ++c) n += calls[c][i];
    total_calls += n;
    EXPECT_EQ(load(stress_body_runs[i]) - body_before[i], n)
        << "stress_fn_" << i << ": body runs differ from calls";
    EXPECT_LE(load(stubs_[i].counter), n) << "stress_fn_" << i << ": stub ran more than calls";
    total_stub += load(stubs_[i].counter);
  }
  EXPECT_GT(total_stub, 0u) << "the stubs never ran: sites were never live";
  std::printf("calls %llu, stub runs %llu, traps emulated %llu, restarted %llu, maps samples %d\n",
              (unsigned long long)total_calls, (unsigned long long)total_stub,
              (unsigned long long)(stats1.traps_emulated - stats0.traps_emulated),
              (unsigned long long)(stats1.traps_restarted - stats0.traps_restarted),
              samples.load());

  // Exact phases: enabled, every call counts once; disabled, none do.
  constexpr uint64_t kExact = 1000;
  std::vector<uint64_t> stub0(kFns);
  for (int i = 0; i < kFns; ++i) stub0[i] = load(stubs_[i].counter);
  set_all(true);
  auto run_exact = [&] {
    std::vector<std::thread> ts;
    for (int c = 0; c < kCallers; ++c)
      ts.emplace_back([&] {
        for (uint64_t k = 0; k < kExact; ++k)
          for (int i = 0; i < kFns; ++i) stress_fns[i](k, k);
      });
    for (auto& t : ts) t.join();
  };
  run_exact();
  for (int i = 0; i < kFns; ++i)
    EXPECT_EQ(load(stubs_[i].counter) - stub0[i], kExact * kCallers) << "stress_fn_" << i;
  set_all(false);
  for (int i = 0; i < kFns; ++i) stub0[i] = load(stubs_[i].counter);
  run_exact();
  for (int i = 0; i < kFns; ++i) {
    EXPECT_EQ(load(stubs_[i].counter), stub0[i]) << "stress_fn_" << i << " still calls its stub";
    EXPECT_EQ(0, memcmp(reinterpret_cast<void*>(stubs_[i].site->addr()), arch::kNop5.data(), 5));
  }
}

}  // namespace
