// Calls whose callee is chosen at run time, made so that the probe layer's proof that a
// handler touches only general-purpose registers can follow them (probe::Analysis::
// gprs_only, docs/probes.md "Vector state"): the caller makes a direct call to a thunk
// of this file, which jumps through a slot named RIP-relatively; the proof reads the
// slot when it looks and follows what it holds. A call through a pointer in a register
// (a function pointer passed as an argument) could go anywhere: it fails the proof, and
// the whole extended state is saved around the handler.
//
// Each slot holds a fallback until a layer above sets it, and again when set to null
// (the fallbacks touch only general-purpose registers too). Setting a slot is not synchronised with calls: set
// it before anything calls it, or to a function that gives the same answers.
#pragma once

#include <time.h>

#include <cstddef>
#include <cstdint>

namespace utramp::arch {

// clock_gettime(clock, ts): the vDSO's once set_clock_gettime gave it (the kernel builds
// the vDSO without vector registers), the system call until then. 0, or -errno.
extern "C" int utramp_slot_clock_gettime(int clock, timespec* ts) noexcept;
void set_clock_gettime(int (*fn)(int, timespec*) noexcept) noexcept;

// The user-stack unwinder's fault-safe read (arch/unwind.hpp SafeRead; the OS layer's,
// above this one) and its return-address fix (ReturnAddressFix: the probe layer's).
// Until set: every read fails, every return address is taken as it is.
extern "C" bool utramp_slot_safe_read(void* dst, uint64_t src, size_t len) noexcept;
extern "C" uint64_t utramp_slot_ra_fix(uint64_t ra, uint64_t slot) noexcept;
void set_safe_read(bool (*fn)(void*, uint64_t, size_t) noexcept) noexcept;
void set_ra_fix(uint64_t (*fn)(uint64_t, uint64_t) noexcept) noexcept;

}  // namespace utramp::arch
