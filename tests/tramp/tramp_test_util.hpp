// What the trampoline tests share: calls the compiler cannot see through, draining the
// retired images, and threads that call traced functions until told to stop.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#include "tramp/trampoline.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define UTRAMP_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UTRAMP_TEST_ASAN 1
#endif
#endif

namespace tramp_test {

// The call goes through a volatile pointer: the compiler can neither inline nor fold it.
template <class F>
F* opaque(F* f) {
  F* volatile p = f;
  return p;
}

// Reclaims until at most `want` retired images are left, a bounded number of times.
inline bool drain_retired(size_t want = 0) {
  auto& m = utramp::tramp::Manager::instance();
  for (int i = 0; i < 1000; ++i) {
    m.reclaim_now();
    if (m.retired() <= want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return m.retired() <= want;
}

// How many cycles a stress test runs: `regular`, or `asan` under AddressSanitizer (its
// allocator slows the attach path down), or what the environment variable `env` says
// (for soaks).
inline uint64_t cycles(const char* env, uint64_t regular, uint64_t asan) {
  if (const char* v = std::getenv(env)) return std::strtoull(v, nullptr, 10);
#ifdef UTRAMP_TEST_ASAN
  (void)regular;
  return asan;
#else
  (void)asan;
  return regular;
#endif
}

// Threads that each run `loop(k, stop)` (k: the thread's number) until join() sets stop;
// joined when destroyed too (a failed assertion returns early).
class Threads {
 public:
  template <class Loop>
  void start(int n, Loop loop) {
    for (int k = 0; k < n; ++k) threads_.emplace_back([this, loop, k] { loop(k, stop_); });
  }
  void join() {
    stop_ = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  ~Threads() { join(); }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace tramp_test
