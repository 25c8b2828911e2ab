// Detach under load: four threads call the traced functions without pause while another
// attaches fentry, fexit and fmod_ret links (near and far programs, and typed C++ links
// whose program objects own heap memory) and, right after each detach, frees the state
// those programs read. A program that ran after its detach returned reads freed memory:
// AddressSanitizer stops the test there, and without it the state's magic is found
// overwritten (counted). Every call's result is checked, and at the end every retired
// image drains.
#include <gtest/gtest.h>
#include <utramp/utramp.h>
#include <utramp/utramp.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "detach_targets.h"
#include "tramp_test_util.hpp"

namespace {

using tramp_test::drain_retired;
using tramp_test::opaque;

struct Callers {
  static constexpr int kThreads = 4;
  std::atomic<uint64_t> wrong{0}, calls{0};
  tramp_test::Threads threads;

  void start() {
    threads.start(kThreads, [this](int k, const std::atomic<bool>& stop) {
        uint64_t n = 0, bad = 0;
        for (int64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
          if (opaque(&td_add)(i, k) != i + k) ++bad;
          const int x = static_cast<int>(i % 1000);
          const int r = opaque(&td_check)(x);
          if (r != 2 * x + 1 && !((x & 1) && r == TD_INJECTED)) ++bad;
          n += 2;
          if (i % 256 == 255) std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
        calls += n;
        wrong += bad;
      });
  }
  void join() { threads.join(); }
};

// What a typed program owns: freed with the Link's program object.
struct Owned {
  std::unique_ptr<uint64_t> magic = std::make_unique<uint64_t>(TD_LIVE);
  std::shared_ptr<std::atomic<uint64_t>> dead;
};

TEST(TrampDetachStress, StateFreedRightAfterDetachIsNeverUsed) {
  const uint64_t cycles = tramp_test::cycles("UTRAMP_DETACH_CYCLES", 2000, 600);
  // First attaches on one thread: the targets' NOPs are canonicalised.
  {
    auto* s = new td_state{TD_LIVE, {0}, {0}, {0}, {0}};
    UTRAMP_OPTS(utramp_attach_opts, o, .cookie = reinterpret_cast<uint64_t>(s));
    for (void* f : {reinterpret_cast<void*>(&td_add), reinterpret_cast<void*>(&td_check),
                    reinterpret_cast<void*>(&td_sleepy)}) {
      auto* l = utramp_attach(f, UTRAMP_FENTRY, &near_count, &o);
      ASSERT_NE(l, nullptr) << utramp_last_error();
      ASSERT_EQ(utramp_link_detach(l), 0) << utramp_last_error();
    }
    delete s;
  }
  const unsigned long near0 = near_dead_runs, far0 = far_dead_runs;
  auto typed_dead = std::make_shared<std::atomic<uint64_t>>(0);
  uint64_t ran = 0, slept = 0;
  Callers callers;
  callers.start();
  // Every kSleepEvery cycles td_sleepy gets an fexit link too, and a thread enters it
  // and stays inside until released, after that link's detach has returned and its
  // state is freed: it comes back through an image whose call of the program detach
  // had to disable.
  constexpr uint64_t kSleepEvery = 10;
  std::atomic<int> go{0}, inside{0}, release{0};
  std::atomic<uint64_t> returns{0};
  tramp_test::Threads sleeper;
  sleeper.start(1, [&](int, const std::atomic<bool>& stop) {
    while (!stop) {
      if (!go.exchange(0)) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        continue;
      }
      opaque(&td_sleepy)(1, &inside, &release);
      ++returns;
    }
  });
  for (uint64_t c = 0; c < cycles; ++c) {
    const utramp_prog_t count = c % 2 ? &far_count : &near_count;
    const utramp_prog_t inject = c % 3 ? &far_inject : &near_inject;
    auto* s = new td_state{TD_LIVE, {0}, {0}, {0}, {0}};
    UTRAMP_OPTS(utramp_attach_opts, add, .cookie = reinterpret_cast<uint64_t>(s),
                .signature = "i64,i64 -> i64");
    UTRAMP_OPTS(utramp_attach_opts, check, .cookie = reinterpret_cast<uint64_t>(s),
                .signature = "i32 -> i32");
    UTRAMP_OPTS(utramp_attach_opts, sleepy, .cookie = reinterpret_cast<uint64_t>(s),
                .signature = "i32,ptr,ptr -> i32");
    std::vector<utramp_attach_req> reqs = {
        {reinterpret_cast<void*>(&td_add), UTRAMP_FENTRY, count, &add, nullptr, 0},
        {reinterpret_cast<void*>(&td_add), UTRAMP_FEXIT, count, &add, nullptr, 0},
        {reinterpret_cast<void*>(&td_check), UTRAMP_FMOD_RET, inject, &check, nullptr, 0},
        {reinterpret_cast<void*>(&td_check), UTRAMP_FEXIT, count, &check, nullptr, 0},
    };
    const bool sleep = c % kSleepEvery == 0;
    if (sleep) reqs.push_back({reinterpret_cast<void*>(&td_sleepy), UTRAMP_FEXIT, count, &sleepy, nullptr, 0});
    ASSERT_EQ(utramp_attach_batch(reqs.data(), reqs.size()), static_cast<int>(reqs.size()))
        << utramp_last_error();
    const uint64_t returns0 = returns;
    if (sleep) {
      inside = 0;
      release = 0;
      go = 1;
      while (!inside) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    Owned owned{std::make_unique<uint64_t>(TD_LIVE), typed_dead};
    utramp::Link typed = utramp::fexit(&td_add, [o = std::move(owned)](int64_t, int64_t, int64_t) {
      if (*o.magic != TD_LIVE) ++*o.dead;
    });
    // Let the callers run through the new images for a moment.
    for (int spin = 0; s->runs.load() < 8 && spin < 2000; ++spin)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    ran += s->runs.load();
    // Detach in a different order each cycle; the state goes right after the last one.
    for (size_t i = 0; i < reqs.size(); ++i) {
      const size_t k = (i + c) % reqs.size();
      ASSERT_EQ(utramp_link_detach(reqs[k].link), 0) << utramp_last_error();
    }
    s->magic = TD_DEAD;
    delete s;
    typed.detach();  // destroys the lambda, and the memory it owns, at once
    if (sleep) {
      release = 1;
      while (returns == returns0) std::this_thread::sleep_for(std::chrono::microseconds(20));
      ++slept;
    }
  }
  sleeper.join();
  callers.join();
  EXPECT_EQ(callers.wrong.load(), 0u) << "calls returned wrong values";
  EXPECT_GT(callers.calls.load(), 0u);
  EXPECT_GT(ran, 0u) << "the programs never ran: the test tested nothing";
  EXPECT_EQ(near_dead_runs - near0, 0u) << "a near program ran after its detach returned";
  EXPECT_EQ(far_dead_runs - far0, 0u) << "a far program ran after its detach returned";
  EXPECT_EQ(typed_dead->load(), 0u) << "a typed program ran after its detach returned";
  EXPECT_TRUE(drain_retired()) << "retired images did not drain";
  EXPECT_EQ(slept, (cycles + kSleepEvery - 1) / kSleepEvery);
  std::printf("detach stress: %llu cycles, %llu calls, %llu program runs, %llu sleeper returns\n",
              static_cast<unsigned long long>(cycles),
              static_cast<unsigned long long>(callers.calls.load()),
              static_cast<unsigned long long>(ran), static_cast<unsigned long long>(slept));
}

// Links of the typed layer made and destroyed on many threads at once (each destroys
// its own): nothing is shared between them any more.
TEST(TrampDetachStress, TypedLinksDestroyedOnManyThreads) {
  constexpr int kThreads = 4, kRounds = 100;
  {
    auto warm = utramp::fentry(&td_add, [](int64_t, int64_t) {});  // canonicalises, alone
  }
  std::atomic<int> failures{0};
  std::atomic<uint64_t> seen{0};
  std::vector<std::thread> ts;
  for (int k = 0; k < kThreads; ++k)
    ts.emplace_back([&, k] {
      for (int r = 0; r < kRounds; ++r) {
        try {
          auto payload = std::make_shared<int>(k);
          auto l = utramp::fentry(&td_add, [payload, &seen](int64_t, int64_t) { seen += *payload >= 0; });
          if (opaque(&td_add)(r, k) != r + k) ++failures;
        } catch (const utramp::error& e) {
          ADD_FAILURE() << e.what();
          ++failures;
        }
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GE(seen.load(), static_cast<uint64_t>(kThreads * kRounds))
      << "each thread's own call ran its own link";
}

}  // namespace
