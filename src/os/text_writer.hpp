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

// Several writes, in order, under one lock and one check of the process (getpid: a
// forked child reopens /proc/self/mem). Stops at the first that fails.
struct TextWrite {
  uint64_t addr = 0;
  std::span<const uint8_t> bytes;
};
Result<void> write_texts(std::span<const TextWrite> writes);

// What went through /proc/self/mem in this process so far: writes (one per TextWrite)
// and their bytes (for tests).
struct TextWriteCount {
  uint64_t writes = 0;
  uint64_t bytes = 0;
};
TextWriteCount text_write_count();

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
// Inside a ThreadCountOnce of the calling thread, the count that scope took.
Result<size_t> thread_count();

// While alive, thread_count() on this thread answers the count taken when the outermost
// scope began, without scanning /proc/self/task again (a batch of thousands of sites
// asked it per site). Only for a caller that holds, for the scope's whole life, the
// lock under which its process decides on thread_count() (the agent's lock, or the
// patching layer's own where there is no agent), and that creates no thread inside
// it. Why the count stays true: a count of 1 means the caller is the only thread that
// may run anything but a parked wait; a new thread is made only by a running thread
// (the caller, which does not), and a parked one leaves its wait only under the lock
// the caller holds. A count above 1 may only shrink meanwhile, and is only ever used
// to choose the more careful way.
class ThreadCountOnce {
 public:
  ThreadCountOnce();
  ~ThreadCountOnce();
  ThreadCountOnce(const ThreadCountOnce&) = delete;
  ThreadCountOnce& operator=(const ThreadCountOnce&) = delete;

 private:
  bool outer_;
};

// How many times this process scanned /proc/self/task for thread_count() (for tests).
uint64_t thread_scans();

// A thread of utramp's own is parked while it waits in a system call made directly from
// utramp's code (no libc function, nothing a patch can change under it), and it leaves
// that state only holding the lock under which its process decides on thread_count()
// (the agent's lock: agent/control.cpp). Parked threads are not counted, so that a
// single-threaded program stays one for the checks that need it (five 1-byte NOPs,
// relocated prologues).
void set_own_thread_parked(bool parked);

}  // namespace utramp::os
