// The number of the CPU the calling thread runs on, read as glibc's sched_getcpu reads
// it (the kernel keeps it in the thread's rseq area) but inline and touching only the
// general-purpose registers: sched_getcpu's fallback calls the vDSO through a pointer,
// which the probe layer cannot follow, so a probe handler that reached it would get the
// extended register state saved around it (docs/probes.md, "Vector state").
//
// The rseq area is found through glibc's __rseq_offset and __rseq_size (glibc 2.35 and
// later), referenced weakly: with an older C library they are absent (null), as they are
// with an rseq area not registered (glibc.pthread.rseq=0: size 0), and the getcpu system
// call is made directly (not the vDSO's getcpu: a call through a pointer again).
// Async-signal-safe.
#pragma once

#include <linux/rseq.h>
#include <sys/syscall.h>

#include <cstddef>
#include <cstdint>

#include "arch/cpu.hpp"

extern "C" {
// glibc >= 2.35 (<sys/rseq.h>, not included: older C libraries do not have it).
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));
}

namespace utramp::os {

namespace detail {

// The CPU by the getcpu system call (0 if it fails).
inline uint32_t cpu_by_syscall() noexcept {
  unsigned cpu = 0;
  if (arch::raw_syscall6(SYS_getcpu, reinterpret_cast<long>(&cpu), 0, 0) < 0) return 0;
  return cpu;
}

// The CPU from the rseq area at `offset` from the thread pointer, registered when `size`
// is non-zero; either null (the C library does not define it): the system call.
inline uint32_t current_cpu(const ptrdiff_t* offset, const unsigned int* size) noexcept {
  if (offset && size && *size) {
    const int32_t c = __atomic_load_n(
        reinterpret_cast<const int32_t*>(arch::thread_pointer() + *offset + offsetof(struct rseq, cpu_id)),
        __ATOMIC_RELAXED);
    if (c >= 0) return static_cast<uint32_t>(c);
  }
  return cpu_by_syscall();
}

}  // namespace detail

inline uint32_t current_cpu() noexcept { return detail::current_cpu(&__rseq_offset, &__rseq_size); }

}  // namespace utramp::os
