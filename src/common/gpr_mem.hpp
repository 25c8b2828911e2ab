// Copy, compare, zero and hash routines that touch only the general-purpose registers.
//
// The C library's memcpy, memcmp and memset are vector code (AVX2, EVEX), and a probe
// handler that reaches them is not proven general-purpose-only: the probe layer saves
// the whole extended register state around it (docs/probes.md, "Vector state"). What
// handlers reach on their hit path (the eBPF maps and helpers) copies, compares and
// hashes through these instead. They are compiled with -mgeneral-regs-only (CMake;
// gpr_mem.cpp refuses to build otherwise) and written so that no compiler turns their
// loops back into library calls; tests/ebpf/maps_test.cpp proves the map helpers with
// the probe layer's own analysis.
#pragma once

#include <cstddef>
#include <cstdint>

namespace utramp::gpr {

void copy(void* dst, const void* src, size_t n) noexcept;
void zero(void* dst, size_t n) noexcept;
bool equal(const void* a, const void* b, size_t n) noexcept;
// A 64-bit hash of n bytes (a word at a time, then a final mix: small integer keys
// spread over every bit).
uint64_t hash(const void* p, size_t n) noexcept;

}  // namespace utramp::gpr
