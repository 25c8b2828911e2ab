// The number of the CPU the calling thread runs on, read as glibc's sched_getcpu reads
// it (the kernel keeps it in the thread's rseq area) but inline and touching only the
// general-purpose registers: sched_getcpu's fallback calls the vDSO through a pointer,
// which the probe layer cannot follow, so a probe handler that reached it would get the
// extended register state saved around it (docs/probes.md, "Vector state"). Without an
// rseq area (glibc.pthread.rseq=0) the getcpu system call is made directly.
// Async-signal-safe.
#pragma once

#include <sys/rseq.h>
#include <sys/syscall.h>

#include <cstddef>
#include <cstdint>

#include "arch/cpu.hpp"

namespace utramp::os {

inline uint32_t current_cpu() noexcept {
  if (__rseq_size) {
    const int32_t c = __atomic_load_n(
        reinterpret_cast<const int32_t*>(arch::thread_pointer() + __rseq_offset + offsetof(struct rseq, cpu_id)),
        __ATOMIC_RELAXED);
    if (c >= 0) return static_cast<uint32_t>(c);
  }
  unsigned cpu = 0;
  if (arch::raw_syscall6(SYS_getcpu, reinterpret_cast<long>(&cpu), 0, 0) < 0) return 0;
  return cpu;
}

}  // namespace utramp::os
