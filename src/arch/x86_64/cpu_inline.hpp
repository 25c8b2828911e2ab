// x86-64 implementations of arch/cpu.hpp. Include arch/cpu.hpp, not this.
#pragma once

#include <x86intrin.h>

#include <cstdint>

namespace utramp::arch {

// The thread pointer: the TCB's self-pointer at %fs:0 (glibc's tcbhead_t.tcb). Initial-
// exec TLS variables sit at fixed offsets from it, the same for every thread.
[[gnu::always_inline]] inline uint64_t thread_pointer() noexcept {
  uint64_t tp;
  asm volatile("mov %%fs:0, %0" : "=r"(tp));
  return tp;
}

// The cycle counter (rdtsc): the tracer's clock. Ticks are rated against the monotonic
// clock by whoever reads the trace (trace/trace_dir.hpp: info.json ticks_per_ns).
[[gnu::always_inline]] inline uint64_t cycles() noexcept { return __rdtsc(); }

}  // namespace utramp::arch
