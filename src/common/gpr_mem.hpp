// Copy, compare, zero and hash routines that touch only the general-purpose registers.
//
// The C library's memcpy, memcmp and memset are vector code (AVX2, EVEX), and a probe
// handler that reaches them is not proven general-purpose-only: the probe layer saves
// the whole extended register state around it (docs/probes.md, "Vector state"). What
// handlers reach on their hit path (the eBPF maps and helpers) copies, compares and
// hashes through these instead. They are compiled with -mgeneral-regs-only (CMake;
// gpr_mem.cpp refuses to build otherwise) and written so that no compiler turns their
// loops back into library calls; tests/ebpf/gprs_proof_test.cpp proves the map helpers with
// the probe layer's own analysis.
#pragma once

#include <cstddef>
#include <cstdint>

namespace utramp::gpr {

void copy(void* dst, const void* src, size_t n) noexcept;
void zero(void* dst, size_t n) noexcept;
// The first byte `c` of the n at p (memchr's answer), null if none.
const void* find(const void* p, uint8_t c, size_t n) noexcept;

namespace detail {
bool equal_bytes(const void* a, const void* b, size_t n) noexcept;
uint64_t hash_bytes(const void* p, size_t n) noexcept;
inline constexpr uint64_t kSeed = 0xcbf29ce484222325ull, kPrime = 0x100000001b3ull;
template <class T>
T load(const void* p) noexcept {
  T v;
  __builtin_memcpy(&v, p, sizeof v);  // a constant size: one move to a general register
  return v;
}
inline uint64_t mix(uint64_t h) noexcept {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}
}  // namespace detail

// The 4- and 8-byte cases (most map keys) inline, the same results as the general code.
inline bool equal(const void* a, const void* b, size_t n) noexcept {
  if (n == 4) return detail::load<uint32_t>(a) == detail::load<uint32_t>(b);
  if (n == 8) return detail::load<uint64_t>(a) == detail::load<uint64_t>(b);
  return detail::equal_bytes(a, b, n);
}
// A 64-bit hash of n bytes: a word at a time (FNV-1a's constants, the high bits folded
// down after each), then a final mix, so that small integer keys spread over every bit.
inline uint64_t hash(const void* p, size_t n) noexcept {
  using namespace detail;
  if (n == 4) return mix(((kSeed ^ 4) ^ load<uint32_t>(p)) * kPrime);
  if (n == 8) {
    const uint64_t h = ((kSeed ^ 8) ^ load<uint64_t>(p)) * kPrime;
    return mix(h ^ (h >> 29));
  }
  return hash_bytes(p, n);
}

}  // namespace utramp::gpr
