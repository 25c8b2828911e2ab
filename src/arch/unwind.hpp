// Walking this process's user stack from a set of registers (a probe hit's), for
// bpf_get_stackid and bpf_get_stack.
//
// Each frame is unwound with the call frame information of the code it is in (the
// object's .eh_frame, found through its PT_GNU_EH_FRAME table by _dl_find_object,
// which is lock-free and async-signal-safe), so functions built without frame
// pointers (-fomit-frame-pointer, Debian's default at -O2) unwind right, including
// the probed function at its first instruction, before any frame is set up. Code
// without CFI (none found, or a rule this unwinder does not evaluate: a DWARF
// expression) is unwound by its frame pointer: the return address at rbp+8, the
// caller's rbp at rbp.
//
// Never faults: every stack word is read from a range this thread has proven readable
// (a fault-safe copy of its page, once, cached per thread: unwinding the same stack
// again costs no system call); a word outside it ends the stack. A frame whose
// canonical frame address does not grow, or whose return address is 0, ends it too.
// Unwind tables are read in place (they are mapped parts of loaded objects).
//
// Async-signal-safe, no allocation, no lock.
#pragma once

#include <cstddef>
#include <cstdint>

namespace utramp::arch {

struct UnwindRegs {
  uint64_t ip;  // the first frame's address: an instruction about to run (not a return address)
  uint64_t sp;
  uint64_t bp;
};

// A return address read from the stack at `slot` that is not the real one (a return
// probe's trampoline): gives the real one (0: unknown, the stack ends).
using ReturnAddressFix = uint64_t (*)(uint64_t ra, uint64_t slot) noexcept;

// Copies `len` bytes at `src` into `dst` without faulting; false if any cannot be read
// (the caller's fault-safe copy: os::safe_read; the OS layer is above this one).
using SafeRead = bool (*)(void* dst, uint64_t src, size_t len) noexcept;

// Writes the first frame's ip, then each caller's return address, up to `max` frames;
// returns how many. `fix` (may be null) is asked about every return address read;
// `read` proves each stack page readable before a word of it is read.
size_t unwind_user(const UnwindRegs& start, uint64_t* ips, size_t max, ReturnAddressFix fix, SafeRead read) noexcept;

// The same with the read and the fix of arch/call_slot.hpp's slots (set_safe_read,
// set_ra_fix), called directly: a probe handler that unwinds this way can be proven to
// touch only general-purpose registers (a call through a pointer passed in cannot be).
size_t unwind_user_slots(const UnwindRegs& start, uint64_t* ips, size_t max) noexcept;

}  // namespace utramp::arch
