// Per-thread state read by generated code, and the registry that lets the reclaimer
// read it for every thread.
//
// Each thread's block is mapped (mmap, on its first entry into a stub) and reached
// through one initial-exec pointer: a library loaded into a running process by dlopen
// gets only a few hundred bytes of initial-exec TLS, and the block is 16 KB. Generated
// code loads the pointer at a fixed offset from the thread pointer, then indexes it:
//   counters[slot]  how many times this thread is inside what `slot` guards (a site's
//                   stub window, or one image); non-atomic: only the owner writes it
//   active[prog]    the recursion guard of each program on this thread: 0, or the stack
//                   pointer of the image run that holds it (a holder a signal handler
//                   left by longjmp is told from a nested run by it: utramp_guard_left)
// A null pointer means "not registered yet": the stub then calls utramp_register_thread,
// which claims a registry entry and the block that entry owns.
//
// Reclamation (DESIGN §5) reads other threads' counters through the registry with a
// fault-safe copy (process_vm_readv), never stopping or signalling them. A block belongs
// to its registry entry, not to its thread: it is never unmapped, and is zeroed and
// handed to the next thread that claims the entry once its thread has exited (the scan
// that sees the thread gone releases the entry), so a scan never reads unmapped memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/result.hpp"

namespace utramp::tramp {

inline constexpr uint32_t kCounterSlots = 2048;
inline constexpr uint32_t kProgSlots = 1024;

struct ThreadBlock {
  uint32_t counters[kCounterSlots];
  uint64_t active[kProgSlots];
};

// Where generated code finds them: the offset of the block pointer from the thread
// pointer (%fs base; the same for every thread), and the fields' offsets in the block.
struct TlsLayout {
  int64_t block;
  int32_t counters, active;
};
TlsLayout tls_layout();

// Called by an image whose program guard (active[prog]) is held, `holder` being its
// value and `frame` the image's frame: non-zero when the run that holds it was left by a
// signal handler's longjmp (the image then takes the guard over and runs the program),
// zero when it still runs below (a nested run: a miss). Keeps rbx, rbp, r12-r15 (the
// ABI's), and is called where the image holds nothing in other registers.
extern "C" uint64_t utramp_guard_left(uint64_t holder, uint64_t frame);

// Adds the calling thread to the registry and gives it a block (idempotent). Called by
// generated code on a thread's first entry into any stub (its block pointer is null),
// and safe from signal handlers and inside the allocator: no lock, no malloc (mmap by
// system call). If no block can be had the pointer stays null and the stub calls again
// at the thread's next entry.
extern "C" void utramp_register_thread();

// A copy of every registered thread's counters (for the slots asked), taken without
// stopping them. A thread whose block cannot be read any more (it exited) is dropped,
// and its registry entry released: the one scan that does (others wait for it).
struct CounterSnapshot {
  std::vector<int> tids;                       // [thread]
  std::vector<std::vector<uint32_t>> values;  // [thread][i] for slots[i]
};
CounterSnapshot snapshot_counters(const std::vector<uint32_t>& slots);

// A waiter's pause between two snapshots (the `spins`-th): a yield at first, then 50 us.
void backoff(unsigned spins);

// Every registered thread's program guard `prog` (active[prog]), read the same way but
// read-only: callable by any thread, at the same time as snapshot_counters.
struct GuardSnapshot {
  std::vector<int> tids;
  std::vector<uint64_t> holders;  // [thread]: 0, or the stack pointer of the run holding it
};
GuardSnapshot snapshot_guard(uint32_t prog);

// Whether the calling thread is running a program now: one of its guards is held by a
// run that still runs below `frame` (a guard left by a signal handler's longjmp is not).
bool this_thread_in_program(uint64_t frame);
// The same for one program guard.
bool this_thread_runs(uint32_t prog, uint64_t frame);

// Slot allocation for counters and program guards. Released slots are reused only once
// the caller has proven every thread's counter for them is zero.
// A counter slot is its owner's alone while free slots remain; once all kCounterSlots
// are taken (a tracer of thousands of functions: each trampoline owns one, each image
// that calls the original another), new owners share the least-shared slot. A
// thread's count then covers every owner of the slot, so what waits for it to be zero
// (reclamation; detach's wait for a thread inside the function) waits for all of them:
// later, never earlier. Never refused. A program guard is always its program's alone.
Result<uint32_t> alloc_counter_slot();
void free_counter_slot(uint32_t slot);
Result<uint32_t> alloc_prog_slot();
void free_prog_slot(uint32_t slot);

// Tests only: called by every scan of the registry with each claimed entry it has read,
// before it looks at that thread (a test runs other threads there). nullptr: none.
void set_scan_hook(void (*hook)(const ThreadBlock* block, int tid));

// Tests only: called by a registration once its entry is claimed and published, just
// before it sets the thread's block pointer (a test raises a signal there). nullptr: none.
void set_register_hook(void (*hook)());

// How many blocks the registry has mapped so far (tests: they are reused, not leaked).
size_t mapped_blocks();

// Set for the whole life of a thread utramp starts for its own work (the trampoline
// reclaimer): the tracer never records what it calls (ftrace: such a thread is ignored
// from its first event), silently, since nothing of the program was lost.
extern __thread bool t_utramp_thread __attribute__((tls_model("initial-exec")));

// This thread's own block (tests, and the unwind personality), registering the thread
// first if it is not yet. When no block can be had (no memory, or every registry entry
// taken), a shared block of zeros that nothing writes (every counter is 0).
ThreadBlock& this_thread_block();

}  // namespace utramp::tramp
