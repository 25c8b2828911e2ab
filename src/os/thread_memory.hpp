// Per-thread memory for state too large for initial-exec TLS.
//
// A library that dlopen loads into a running process (utramp attaching, docs/attach.md)
// gets only the few hundred bytes of initial-exec TLS glibc keeps in reserve, so a
// large per-thread block lives in memory mapped on the thread's first use and is
// reached through one initial-exec pointer. The block is unmapped at the thread's exit
// (a pthread key's destructor, which runs then) and the pointer set back to null.
//
// Async-signal-safe, and safe inside the allocator: mmap by system call, no malloc, no
// lock (the block is linked into this thread's list by a compare-and-swap that a
// signal handler interrupting it cannot tear). The key is created when the library is
// loaded; pthread_setspecific takes no allocation for the first 32 keys of a process
// (glibc keeps them in the thread's descriptor), which is where a preloaded library's
// key is; a key created later may cost one allocation per thread on first use.
#pragma once

#include <cstddef>

namespace utramp::os {

// Maps `size` zeroed bytes for the calling thread, stores their address in `*slot`
// (the caller's initial-exec pointer) and returns it; at the thread's exit they are
// unmapped and `*slot` cleared. Null when no memory can be mapped (`*slot` unchanged).
void* map_thread_memory(void** slot, size_t size) noexcept;

}  // namespace utramp::os
