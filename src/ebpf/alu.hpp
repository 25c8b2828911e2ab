// What each ALU and conditional-jump operation computes (RFC 9669), in one place: the
// interpreter executes these, the verifier folds constants with them, so the two can
// never disagree on a division by zero, INT_MIN / -1 or a shift by 64.
//
//   div by 0  -> 0            mod by 0  -> the dividend (ALU: its low 32 bits)
//   sdiv INT_MIN by -1 -> INT_MIN (wraps)     smod by -1 -> 0
//   shifts    the count masked to 63 (ALU64) or 31 (ALU)
#pragma once

#include <cstdint>

#include "ebpf/insn.hpp"

namespace utramp::ebpf::isa {

// The operation of an ALU instruction on 64-bit operands (ALU64). `off` 1 selects the
// signed division and modulo.
inline uint64_t alu64(uint8_t o, int16_t off, uint64_t d, uint64_t s) {
  using namespace op;
  switch (o) {
    case kAdd: return d + s;
    case kSub: return d - s;
    case kMul: return d * s;
    case kDiv:
      if (s == 0) return 0;
      if (off == 0) return d / s;
      if (s == ~uint64_t(0)) return 0 - d;  // INT64_MIN / -1 wraps to INT64_MIN
      return static_cast<uint64_t>(static_cast<int64_t>(d) / static_cast<int64_t>(s));
    case kOr: return d | s;
    case kAnd: return d & s;
    case kLsh: return d << (s & 63);
    case kRsh: return d >> (s & 63);
    case kNeg: return 0 - d;
    case kMod:
      if (s == 0) return d;
      if (off == 0) return d % s;
      if (s == ~uint64_t(0)) return 0;
      return static_cast<uint64_t>(static_cast<int64_t>(d) % static_cast<int64_t>(s));
    case kXor: return d ^ s;
    case kMov: return s;
    case kArsh: return static_cast<uint64_t>(static_cast<int64_t>(d) >> (s & 63));
  }
  return d;
}

// ALU (32-bit): operands are the low halves, the result is zero-extended.
inline uint64_t alu32(uint8_t o, int16_t off, uint32_t d, uint32_t s) {
  using namespace op;
  switch (o) {
    case kAdd: return uint32_t(d + s);
    case kSub: return uint32_t(d - s);
    case kMul: return uint32_t(d * s);
    case kDiv:
      if (s == 0) return 0;
      if (off == 0) return d / s;
      if (s == ~uint32_t(0)) return uint32_t(0 - d);
      return uint32_t(static_cast<int32_t>(d) / static_cast<int32_t>(s));
    case kOr: return d | s;
    case kAnd: return d & s;
    case kLsh: return uint32_t(d << (s & 31));
    case kRsh: return d >> (s & 31);
    case kNeg: return uint32_t(0 - d);
    case kMod:
      if (s == 0) return d;
      if (off == 0) return d % s;
      if (s == ~uint32_t(0)) return 0;
      return uint32_t(static_cast<int32_t>(d) % static_cast<int32_t>(s));
    case kXor: return d ^ s;
    case kMov: return s;
    case kArsh: return uint32_t(static_cast<int32_t>(d) >> (s & 31));
  }
  return d;
}

inline uint64_t sign_extend(uint64_t v, int bits) {
  switch (bits) {
    case 8: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(v)));
    case 16: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int16_t>(v)));
    case 32: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(v)));
    default: return v;
  }
}

// le16/le32/le64 (swap false on this little-endian machine: a truncation), be16/32/64
// and bswap16/32/64 (swap true).
inline uint64_t byte_swap(uint64_t v, int32_t bits, bool swap) {
  switch (bits) {
    case 16: return swap ? __builtin_bswap16(uint16_t(v)) : uint16_t(v);
    case 32: return swap ? __builtin_bswap32(uint32_t(v)) : uint32_t(v);
    default: return swap ? __builtin_bswap64(v) : v;
  }
}

// Whether a conditional jump is taken: U/S are uint64_t/int64_t (JMP) or
// uint32_t/int32_t (JMP32, on the low halves).
template <class U, class S>
inline bool cond(uint8_t o, U d, U s) {
  using namespace op;
  switch (o) {
    case kJeq: return d == s;
    case kJgt: return d > s;
    case kJge: return d >= s;
    case kJset: return (d & s) != 0;
    case kJne: return d != s;
    case kJsgt: return S(d) > S(s);
    case kJsge: return S(d) >= S(s);
    case kJlt: return d < s;
    case kJle: return d <= s;
    case kJslt: return S(d) < S(s);
    case kJsle: return S(d) <= S(s);
  }
  return false;
}

}  // namespace utramp::ebpf::isa
