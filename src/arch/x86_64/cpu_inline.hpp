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

// A system call made here, not through libc: for the code that runs inside traced
// calls (the tracer's hooks, probe handlers), where libc's wrapper may itself be a traced
// function (`record --libs`) and calling it would re-enter the hook. Returns the
// kernel's result (-errno on failure); errno is not touched.
[[gnu::always_inline]] inline long raw_syscall6(long nr, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0,
                                               long a5 = 0, long a6 = 0) noexcept {
  long ret;
  register long r10 asm("r10") = a4;
  register long r8 asm("r8") = a5;
  register long r9 asm("r9") = a6;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
               : "rcx", "r11", "memory");
  return ret;
}

}  // namespace utramp::arch
