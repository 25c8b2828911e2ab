// Writes to code that is mapped without write permission, through /proc/self/mem.
//
// The kernel performs the write as a forced access (a private copy of the page, like a
// debugger's breakpoint): no mapping of this process ever becomes writable, so no page
// is ever writable and executable at once, and protections are never touched.
#pragma once

#include <cstdint>
#include <span>

#include "common/result.hpp"

namespace utramp::os {

// Writes `bytes` at `addr` of this process. Thread-safe; reopens after fork.
Result<void> write_text(uint64_t addr, std::span<const uint8_t> bytes);

// Replaces the 8-byte word at ADDR with VALUE if it holds EXPECTED (a GOT slot that
// utramp points elsewhere and back: ftrace/libcall.hpp, the agent's signal functions);
// true when written, false when it held something else. READ_ONLY: written through
// write_text (a slot in RELRO, which only utramp writes after relocation); otherwise
// compared and swapped atomically (the loader's resolver may be binding it).
Result<bool> replace_word(uint64_t addr, uint64_t expected, uint64_t value, bool read_only);

// Serialises the instruction stream of every running thread of this process
// (membarrier PRIVATE_EXPEDITED_SYNC_CORE, registered on first use).
Result<void> sync_cores();

// Held across fork() (see tramp/trampoline.cpp).
void text_fork_lock();
void text_fork_unlock();

// Number of threads of this process (from /proc/self/task), less utramp's own threads
// that are parked (below): the threads that may be running the program's code.
Result<size_t> thread_count();

// A thread of utramp's own is parked while it waits in a system call made directly from
// utramp's code (no libc function, nothing a patch can change under it), and it leaves
// that state only holding the lock under which its process decides on thread_count()
// (the agent's lock: agent/control.cpp). Parked threads are not counted, so that a
// single-threaded program stays one for the checks that need it (five 1-byte NOPs,
// relocated prologues).
void set_own_thread_parked(bool parked);

}  // namespace utramp::os
