#include "ebpf/bounds.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "ebpf/alu.hpp"

namespace utramp::ebpf {

namespace {

constexpr uint64_t kSign = uint64_t(1) << 63;
constexpr uint64_t kU32 = 0xffffffffu;

}  // namespace

// ---- Tnum ------------------------------------------------------------------------------

Tnum Tnum::range(uint64_t lo, uint64_t hi) {
  const uint64_t chi = lo ^ hi;
  if (chi == 0) return constant(lo);
  const int bits = 64 - __builtin_clzll(chi);
  if (bits >= 64) return unknown();
  const uint64_t delta = (uint64_t(1) << bits) - 1;
  return {lo & ~delta, delta};
}

// Known bits add as numbers; an unknown bit may or may not carry into every bit above
// it that the carries can reach: the bits where (value sum) and (value sum + mask sum)
// differ, plus the unknown bits themselves.
Tnum Tnum::add(Tnum o) const {
  const uint64_t sm = mask + o.mask;
  const uint64_t sv = value + o.value;
  const uint64_t sigma = sm + sv;
  const uint64_t chi = sigma ^ sv;
  const uint64_t mu = chi | mask | o.mask;
  return {sv & ~mu, mu};
}

Tnum Tnum::sub(Tnum o) const {
  const uint64_t dv = value - o.value;
  const uint64_t alpha = dv + mask;
  const uint64_t beta = dv - o.mask;
  const uint64_t chi = alpha ^ beta;
  const uint64_t mu = chi | mask | o.mask;
  return {dv & ~mu, mu};
}

// Long multiplication: the known parts multiply exactly; each bit of this that is
// unknown (or known 1) adds the other operand's unknown part (or all of it) shifted.
Tnum Tnum::mul(Tnum o) const {
  const uint64_t known = value * o.value;
  Tnum acc = constant(0);
  Tnum a = *this, b = o;
  while (a.value || a.mask) {
    if (a.value & 1) acc = acc.add({0, b.mask});
    else if (a.mask & 1) acc = acc.add({0, b.value | b.mask});
    a = a.rsh(1);
    b = b.lsh(1);
  }
  return constant(known).add(acc);
}

Tnum Tnum::intersect(Tnum o, bool* ok) const {
  if ((value ^ o.value) & ~(mask | o.mask)) {
    *ok = false;
    return *this;
  }
  *ok = true;
  const uint64_t mu = mask & o.mask;
  return {(value | o.value) & ~mu, mu};
}

Tnum Tnum::trunc(unsigned bytes) const {
  if (bytes >= 8) return *this;
  const uint64_t m = (uint64_t(1) << (8 * bytes)) - 1;
  return {value & m, mask & m};
}

// ---- Scalar ----------------------------------------------------------------------------

Scalar Scalar::constant(uint64_t v) {
  Scalar s;
  s.t = Tnum::constant(v);
  s.umin = s.umax = v;
  s.smin = s.smax = static_cast<int64_t>(v);
  return s;
}

Scalar Scalar::urange(uint64_t lo, uint64_t hi) {
  Scalar s;
  s.umin = lo;
  s.umax = hi;
  s.t = Tnum::range(lo, hi);
  (void)s.sync();
  return s;
}

Scalar Scalar::srange(int64_t lo, int64_t hi) {
  Scalar s;
  s.smin = lo;
  s.smax = hi;
  (void)s.sync();
  return s;
}

Scalar Scalar::of_size(unsigned bytes, bool sign_extended) {
  if (bytes >= 8) return unknown();
  const unsigned bits = 8 * bytes;
  if (sign_extended) return srange(-(int64_t(1) << (bits - 1)), (int64_t(1) << (bits - 1)) - 1);
  return urange(0, (uint64_t(1) << bits) - 1);
}

bool Scalar::sync() {
  for (int round = 0; round < 2; ++round) {
    umin = std::max(umin, t.min());
    umax = std::min(umax, t.max());
    if ((t.mask & kSign) == 0) {
      // The sign is known: within one half, signed and unsigned orders agree.
      smin = std::max(smin, static_cast<int64_t>(t.min()));
      smax = std::min(smax, static_cast<int64_t>(t.max()));
    } else {
      smin = std::max(smin, static_cast<int64_t>(t.value | kSign));
      smax = std::min(smax, static_cast<int64_t>(t.max() & ~kSign));
    }
    if ((static_cast<uint64_t>(smin) ^ static_cast<uint64_t>(smax)) >> 63 == 0) {
      umin = std::max(umin, static_cast<uint64_t>(smin));
      umax = std::min(umax, static_cast<uint64_t>(smax));
    }
    if ((umin ^ umax) >> 63 == 0) {
      smin = std::max(smin, static_cast<int64_t>(umin));
      smax = std::min(smax, static_cast<int64_t>(umax));
    }
    if (umin > umax || smin > smax) return false;
    bool ok = true;
    t = t.intersect(Tnum::range(umin, umax), &ok);
    if (!ok) return false;
  }
  return umin <= umax && smin <= smax;
}

Scalar Scalar::join(const Scalar& o) const {
  Scalar r;
  r.t = t.join(o.t);
  r.umin = std::min(umin, o.umin);
  r.umax = std::max(umax, o.umax);
  r.smin = std::min(smin, o.smin);
  r.smax = std::max(smax, o.smax);
  return r;
}

Scalar Scalar::low32() const {
  if (fits_u32()) return *this;
  Scalar r;
  r.t = t.trunc(4);
  if ((umin >> 32) == (umax >> 32)) {  // one 4 GiB block: the low halves keep their order
    r.umin = umin & kU32;
    r.umax = umax & kU32;
  } else {
    r.umin = 0;
    r.umax = kU32;
  }
  if (!r.sync()) return urange(0, kU32);
  return r;
}

namespace {

Scalar alu_ranges64(uint8_t o, int16_t off, const Scalar& d, const Scalar& s) {
  using namespace op;
  Scalar r;
  switch (o) {
    case kAdd: {
      r.t = d.t.add(s.t);
      uint64_t hi;
      if (!__builtin_add_overflow(d.umax, s.umax, &hi)) r.umin = d.umin + s.umin, r.umax = hi;
      int64_t a, b;
      if (!__builtin_add_overflow(d.smin, s.smin, &a) && !__builtin_add_overflow(d.smax, s.smax, &b))
        r.smin = a, r.smax = b;
      break;
    }
    case kSub: {
      r.t = d.t.sub(s.t);
      if (d.umin >= s.umax) r.umin = d.umin - s.umax, r.umax = d.umax - s.umin;
      int64_t a, b;
      if (!__builtin_sub_overflow(d.smin, s.smax, &a) && !__builtin_sub_overflow(d.smax, s.smin, &b))
        r.smin = a, r.smax = b;
      break;
    }
    case kMul: {
      r.t = d.t.mul(s.t);
      uint64_t hi;
      if (!__builtin_mul_overflow(d.umax, s.umax, &hi)) r.umin = d.umin * s.umin, r.umax = hi;
      break;
    }
    case kAnd:
      r.t = d.t.and_(s.t);
      r.umax = std::min(d.umax, s.umax);
      break;
    case kOr:
      r.t = d.t.or_(s.t);
      r.umin = std::max(d.umin, s.umin);
      break;
    case kXor: r.t = d.t.xor_(s.t); break;
    case kLsh:
      if (s.is_const()) {
        const unsigned k = s.value() & 63;
        r.t = d.t.lsh(k);
        if (k == 0 || (d.umax >> (64 - k)) == 0) r.umin = d.umin << k, r.umax = d.umax << k;
      }
      break;
    case kRsh:
      if (s.is_const()) {
        const unsigned k = s.value() & 63;
        r.t = d.t.rsh(k);
        r.umin = d.umin >> k;
        r.umax = d.umax >> k;
      } else {
        r.umax = d.umax;
      }
      break;
    case kArsh:
      if (s.is_const()) {
        const unsigned k = s.value() & 63;
        r.t = d.t.arsh(k);
        r.smin = d.smin >> k;
        r.smax = d.smax >> k;
      } else {  // between the value and its sign (0 or -1)
        r.smin = std::min<int64_t>(d.smin, 0);
        r.smax = std::max<int64_t>(d.smax, 0);
      }
      break;
    case kDiv:
      if (off != 0) break;  // signed division: unknown unless constant (folded above)
      if (s.umin > 0) r.umin = d.umin / s.umax, r.umax = d.umax / s.umin;
      else r.umax = d.umax;  // the quotient is at most the dividend; 0 when dividing by 0
      break;
    case kMod:
      if (off != 0) break;
      // The remainder is at most the dividend and below the divisor; the dividend
      // itself when dividing by 0.
      if (s.umin > 0) r.umax = std::min(d.umax, s.umax - 1);
      else r.umax = d.umax;
      break;
    case kMov: return s;
    default: break;
  }
  if (!r.sync()) return Scalar::unknown();
  return r;
}

}  // namespace

Scalar Scalar::alu(uint8_t o, int16_t off, bool is64, const Scalar& d, const Scalar& s) {
  using namespace op;
  if (o == kNeg) return alu(kSub, 0, is64, constant(0), d);
  if (d.is_const() && s.is_const()) {
    return constant(is64 ? isa::alu64(o, off, d.value(), s.value())
                         : isa::alu32(o, off, static_cast<uint32_t>(d.value()), static_cast<uint32_t>(s.value())));
  }
  if (is64) return alu_ranges64(o, off, d, s);
  // ALU32: the operation on the zero-extended low halves, then truncated, is the
  // 32-bit operation for everything but the signed ones and shifts (masked by 31).
  const Scalar a = d.low32(), b = s.low32();
  switch (o) {
    case kArsh:
    case kDiv:
    case kMod:
      if (o == kArsh || off != 0) {
        if (o == kArsh && b.is_const() && a.umax <= 0x7fffffffu)  // a non-negative s32
          return alu_ranges64(kRsh, 0, a, constant(b.value() & 31)).low32();
        return urange(0, kU32);
      }
      return alu_ranges64(o, 0, a, b).low32();
    case kLsh:
    case kRsh:
      if (!b.is_const()) return o == kRsh ? urange(0, a.umax) : urange(0, kU32);
      return alu_ranges64(o, 0, a, constant(b.value() & 31)).low32();
    default: return alu_ranges64(o, off, a, b).low32();
  }
}

Scalar Scalar::sign_extend(const Scalar& s, int bits, bool is64) {
  if (s.is_const()) {
    const uint64_t v = isa::sign_extend(s.value(), bits);
    return constant(is64 ? v : static_cast<uint32_t>(v));
  }
  const uint64_t half = uint64_t(1) << (bits - 1);
  Scalar r = s.umax < half ? s : srange(-static_cast<int64_t>(half), static_cast<int64_t>(half) - 1);
  return is64 ? r : r.low32();
}

Scalar Scalar::byte_swap(const Scalar& s, int bits, bool swap) {
  if (s.is_const()) return constant(isa::byte_swap(s.value(), bits, swap));
  if (swap) return of_size(static_cast<unsigned>(bits / 8));
  if (bits == 64) return s;
  if (s.umax < (uint64_t(1) << bits)) return s;
  Scalar r = of_size(static_cast<unsigned>(bits / 8));
  bool ok = true;
  r.t = r.t.intersect(s.t.trunc(static_cast<unsigned>(bits / 8)), &ok);
  if (!ok || !r.sync()) return of_size(static_cast<unsigned>(bits / 8));
  return r;
}

std::string Scalar::str() const {
  if (is_const()) {
    const int64_t v = static_cast<int64_t>(value());
    if (v >= -4096 && v <= 4096) return fmt::format("{}", v);
    return fmt::format("{:#x}", value());
  }
  std::string out;
  auto add = [&](const std::string& x) { out += (out.empty() ? "" : " ") + x; };
  if (smin >= 0 && static_cast<uint64_t>(smin) == umin && static_cast<uint64_t>(smax) == umax) {
    add(fmt::format("[{}, {}]", umin, umax));
  } else {
    if (umin != 0 || umax != ~uint64_t(0)) add(fmt::format("u[{}, {}]", umin, umax));
    if (smin != INT64_MIN || smax != INT64_MAX) add(fmt::format("s[{}, {}]", smin, smax));
  }
  if (t.mask != ~uint64_t(0) && t.mask != Tnum::range(umin, umax).mask)
    add(fmt::format("var=({:#x}; {:#x})", t.value, t.mask));
  return out.empty() ? "unknown" : out;
}

// ---- conditional jumps -------------------------------------------------------------------

namespace {

// The opposite condition: the one that holds when `o` does not.
uint8_t negate(uint8_t o) {
  using namespace op;
  switch (o) {
    case kJeq: return kJne;
    case kJne: return kJeq;
    case kJgt: return kJle;
    case kJle: return kJgt;
    case kJge: return kJlt;
    case kJlt: return kJge;
    case kJsgt: return kJsle;
    case kJsle: return kJsgt;
    case kJsge: return kJslt;
    case kJslt: return kJsge;
    default: return o;  // jset: handled apart
  }
}

bool is_signed_op(uint8_t o) {
  using namespace op;
  return o == kJsgt || o == kJsge || o == kJslt || o == kJsle;
}

Branch outcome64(uint8_t o, const Scalar& d, const Scalar& s) {
  using namespace op;
  auto b = [](bool always, bool never) { return always ? Branch::always : never ? Branch::never : Branch::maybe; };
  switch (o) {
    case kJeq:
    case kJne: {
      bool ok = true;
      (void)d.t.intersect(s.t, &ok);
      const bool disjoint = !ok || d.umax < s.umin || d.umin > s.umax || d.smax < s.smin || d.smin > s.smax;
      const bool same = d.is_const() && s.is_const() && d.value() == s.value();
      return o == kJeq ? b(same, disjoint) : b(disjoint, same);
    }
    case kJgt: return b(d.umin > s.umax, d.umax <= s.umin);
    case kJge: return b(d.umin >= s.umax, d.umax < s.umin);
    case kJlt: return b(d.umax < s.umin, d.umin >= s.umax);
    case kJle: return b(d.umax <= s.umin, d.umin > s.umax);
    case kJsgt: return b(d.smin > s.smax, d.smax <= s.smin);
    case kJsge: return b(d.smin >= s.smax, d.smax < s.smin);
    case kJslt: return b(d.smax < s.smin, d.smin >= s.smax);
    case kJsle: return b(d.smax <= s.smin, d.smin > s.smax);
    case kJset: return b((d.t.value & s.t.value) != 0, (d.t.max() & s.t.max()) == 0);
  }
  return Branch::maybe;
}

// d OP s holds: narrow both (64-bit views).
bool narrow64(uint8_t o, bool taken, Scalar& d, Scalar& s) {
  using namespace op;
  if (o == kJset) {
    if (!s.is_const()) return d.sync() && s.sync();
    const uint64_t c = s.value();
    bool ok = true;
    if (!taken) d.t = d.t.intersect({0, ~c}, &ok);  // every bit of c is 0
    else if (c && (c & (c - 1)) == 0) d.t = d.t.intersect({c, ~c}, &ok);  // that one bit is 1
    return ok && d.sync();
  }
  if (!taken) o = negate(o);
  switch (o) {
    case kJeq: {
      bool ok = true;
      const Tnum t = d.t.intersect(s.t, &ok);
      if (!ok) return false;
      Scalar m;
      m.t = t;
      m.umin = std::max(d.umin, s.umin);
      m.umax = std::min(d.umax, s.umax);
      m.smin = std::max(d.smin, s.smin);
      m.smax = std::min(d.smax, s.smax);
      d = s = m;
      break;
    }
    case kJne: {
      // A constant excluded at an end of the other's range moves that end.
      auto cut = [](Scalar& x, uint64_t c) {
        if (x.umin == c && x.umin != ~uint64_t(0)) ++x.umin;
        else if (x.umin == c) return false;
        if (x.umax == c && x.umax != 0) --x.umax;
        else if (x.umax == c) return false;
        const int64_t sc = static_cast<int64_t>(c);
        if (x.smin == sc && x.smin != INT64_MAX) ++x.smin;
        else if (x.smin == sc) return false;
        if (x.smax == sc && x.smax != INT64_MIN) --x.smax;
        else if (x.smax == sc) return false;
        return true;
      };
      if (s.is_const() && !cut(d, s.value())) return false;
      if (d.is_const() && !s.is_const() && !cut(s, d.value())) return false;
      if (d.is_const() && s.is_const() && d.value() == s.value()) return false;
      break;
    }
    case kJgt:
      if (s.umin == ~uint64_t(0) || d.umax == 0) return false;
      d.umin = std::max(d.umin, s.umin + 1);
      s.umax = std::min(s.umax, d.umax - 1);
      break;
    case kJge:
      d.umin = std::max(d.umin, s.umin);
      s.umax = std::min(s.umax, d.umax);
      break;
    case kJsgt:
      if (s.smin == INT64_MAX || d.smax == INT64_MIN) return false;
      d.smin = std::max(d.smin, s.smin + 1);
      s.smax = std::min(s.smax, d.smax - 1);
      break;
    case kJsge:
      d.smin = std::max(d.smin, s.smin);
      s.smax = std::min(s.smax, d.smax);
      break;
    // d < s is s > d: the same narrowing with the operands swapped.
    case kJlt: return narrow64(kJgt, true, s, d);
    case kJle: return narrow64(kJge, true, s, d);
    case kJslt: return narrow64(kJsgt, true, s, d);
    case kJsle: return narrow64(kJsge, true, s, d);
    default: break;
  }
  return d.sync() && s.sync();
}

// The signed 32-bit view of a value that fits in 32 bits, as a 64-bit signed scalar,
// and whether it is exact (the value lies in one half of [0, 2^32): then the view is
// the value itself or the value - 2^32, and narrowing it narrows the value).
Scalar s32_view(const Scalar& x32, bool* exact) {
  *exact = true;
  if (x32.umax <= 0x7fffffffu) return x32;
  if (x32.umin >= 0x80000000u)
    return Scalar::srange(static_cast<int64_t>(x32.umin) - (int64_t(1) << 32),
                          static_cast<int64_t>(x32.umax) - (int64_t(1) << 32));
  *exact = false;
  return Scalar::srange(INT32_MIN, INT32_MAX);
}

Scalar from_s32_view(const Scalar& v) {
  if (v.smin >= 0) return v;
  return Scalar::urange(static_cast<uint64_t>(v.smin + (int64_t(1) << 32)),
                        static_cast<uint64_t>(v.smax + (int64_t(1) << 32)));
}

}  // namespace

Branch branch_outcome(uint8_t o, bool is64, const Scalar& d, const Scalar& s) {
  if (is64) return outcome64(o, d, s);
  const Scalar a = d.low32(), b = s.low32();
  if (!is_signed_op(o)) return outcome64(o, a, b);
  bool ea, eb;
  return outcome64(o, s32_view(a, &ea), s32_view(b, &eb));
}

bool narrow(uint8_t o, bool is64, bool taken, Scalar& d, Scalar& s) {
  if (is64) return narrow64(o, taken, d, s);
  Scalar a = d.low32(), b = s.low32();
  if (!is_signed_op(o)) {
    if (!narrow64(o, taken, a, b)) return false;
    // Only a value that is its own low half can take the narrowed view.
    if (d.fits_u32()) d = a;
    if (s.fits_u32()) s = b;
    return true;
  }
  bool ea, eb;
  Scalar va = s32_view(a, &ea), vb = s32_view(b, &eb);
  if (!narrow64(o, taken, va, vb)) return false;
  if (ea && d.fits_u32()) d = from_s32_view(va);
  if (eb && s.fits_u32()) s = from_s32_view(vb);
  return true;
}

}  // namespace utramp::ebpf
