// The verifier's numeric domain: what is known of a 64-bit value.
//
// A Tnum ("tristate number") knows some bits: `value` holds the known ones, `mask` the
// unknown ones (a bit is never set in both). {value 0b100, mask 0b011} is every number
// 0b1xx. Arithmetic on tnums is exact bit by bit where the operands' bits are known and
// carries the unknown bits with the carries they may cause.
//
// A Scalar is a tnum together with unsigned and signed ranges. The three views are
// kept consistent by sync(): each narrows the others (a tnum with the sign bit known 0
// bounds the signed range below by 0, an unsigned range [0, 255] makes every bit above
// bit 7 known 0...). A Scalar with no value left (umin > umax after a branch narrowed
// it) is infeasible: the branch that produced it cannot be taken.
//
// Every operation over-approximates: the result contains every value the operation
// can produce from values of the operands. 32-bit operations see the low halves and
// give zero-extended results, as the ISA does.
#pragma once

#include <cstdint>
#include <string>

namespace utramp::ebpf {

struct Tnum {
  uint64_t value = 0;
  uint64_t mask = ~uint64_t(0);

  static Tnum constant(uint64_t v) { return {v, 0}; }
  static Tnum unknown() { return {0, ~uint64_t(0)}; }
  // The smallest tnum holding every value of [lo, hi].
  static Tnum range(uint64_t lo, uint64_t hi);

  bool is_const() const { return mask == 0; }
  // Every value of `o` is a value of this.
  bool contains(Tnum o) const { return (o.mask & ~mask) == 0 && (o.value & ~mask) == value; }
  uint64_t min() const { return value; }
  uint64_t max() const { return value | mask; }

  Tnum add(Tnum o) const;
  Tnum sub(Tnum o) const;
  Tnum mul(Tnum o) const;
  Tnum and_(Tnum o) const { return {value & o.value, (value | mask) & (o.value | o.mask) & ~(value & o.value)}; }
  Tnum or_(Tnum o) const { return {value | o.value, (mask | o.mask) & ~(value | o.value)}; }
  Tnum xor_(Tnum o) const {
    const uint64_t m = mask | o.mask;
    return {(value ^ o.value) & ~m, m};
  }
  Tnum lsh(unsigned k) const { return {value << k, mask << k}; }
  Tnum rsh(unsigned k) const { return {value >> k, mask >> k}; }
  Tnum arsh(unsigned k) const {
    return {static_cast<uint64_t>(static_cast<int64_t>(value) >> k),
            static_cast<uint64_t>(static_cast<int64_t>(mask) >> k)};
  }
  // The values both may have; `ok` false when they share none.
  Tnum intersect(Tnum o, bool* ok) const;
  // Every value either may have.
  Tnum join(Tnum o) const {
    const uint64_t m = mask | o.mask | (value ^ o.value);
    return {value & ~m, m};
  }
  Tnum trunc(unsigned bytes) const;  // the low `bytes` bytes, zero-extended

  friend bool operator==(const Tnum&, const Tnum&) = default;
};

struct Scalar {
  Tnum t;
  uint64_t umin = 0, umax = ~uint64_t(0);
  int64_t smin = INT64_MIN, smax = INT64_MAX;

  static Scalar constant(uint64_t v);
  static Scalar unknown() { return {}; }
  static Scalar urange(uint64_t lo, uint64_t hi);  // unsigned [lo, hi]
  static Scalar srange(int64_t lo, int64_t hi);    // signed [lo, hi]
  // An unknown value of `bytes` bytes, zero-extended (a load) or sign-extended.
  static Scalar of_size(unsigned bytes, bool sign_extended = false);

  bool is_const() const { return t.is_const(); }
  uint64_t value() const { return t.value; }
  bool fits_u32() const { return umax <= 0xffffffffu; }

  // Narrows the views against each other; false when no value is left.
  bool sync();
  // Every value of `o` is a value of this (pruning: a state explored with this value
  // covers one with `o`).
  bool contains(const Scalar& o) const {
    return umin <= o.umin && umax >= o.umax && smin <= o.smin && smax >= o.smax && t.contains(o.t);
  }
  Scalar join(const Scalar& o) const;
  bool operator==(const Scalar& o) const = default;

  // ALU operations (is64 false: ALU32 on the low halves). `op` is the opcode's
  // operation (op::kAdd...), `off` the signed-division selector. Never fails: a result
  // it cannot bound is unknown (of 32 bits for ALU32).
  static Scalar alu(uint8_t op, int16_t off, bool is64, const Scalar& d, const Scalar& s);
  // movsx: the low `bits` bits sign-extended to 64 (is64) or 32 bits.
  static Scalar sign_extend(const Scalar& s, int bits, bool is64);
  // le/be/bswap of `bits` bits.
  static Scalar byte_swap(const Scalar& s, int bits, bool swap);
  // The low 32 bits, zero-extended.
  Scalar low32() const;

  // "0x10", "[0, 255]", "smin=-8 smax=7 var=(0x0; 0xf)": the short form the log shows.
  std::string str() const;
};

// Conditional jumps on scalars: whether `d OP s` is always, never or maybe true, and
// the operands as narrowed by the outcome. JMP32 (is64 false) compares the low halves.
enum class Branch : uint8_t { never, maybe, always };
Branch branch_outcome(uint8_t op, bool is64, const Scalar& d, const Scalar& s);
// Narrows d and s to the values for which `d OP s` is `taken`. False when none are left
// (the branch is infeasible). For JMP32 it narrows only operands that fit in 32 bits.
bool narrow(uint8_t op, bool is64, bool taken, Scalar& d, Scalar& s);

}  // namespace utramp::ebpf
