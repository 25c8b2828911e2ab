// arch/xstate.hpp: what this CPU's extended state is and how big its save area is.
#include "arch/xstate.hpp"

#include <cpuid.h>

#include <algorithm>

namespace utramp::arch {

uint32_t xstate_area_bytes(const CpuidXState& c, uint64_t mask, XStateSave::Mode mode) noexcept {
  constexpr uint32_t kLegacyAndHeader = 512 + 64;
  if (mode == XStateSave::Mode::fxsave) return 512;
  uint32_t end = kLegacyAndHeader;
  for (size_t i = 2; i < c.comp.size(); ++i) {
    if (!(mask >> i & 1)) continue;
    const CpuidXState::Component& k = c.comp[i];
    if (mode == XStateSave::Mode::xsave) {
      end = std::max(end, k.offset + k.size);
    } else {
      if (k.align64) end = (end + 63) / 64 * 64;
      end += k.size;
    }
  }
  return end;
}

XStateSave xstate_for(const CpuidXState& c, uint64_t xcr0, bool avx512bw) noexcept {
  XStateSave x;
  constexpr uint64_t kAmxTiles = (uint64_t{1} << 17) | (uint64_t{1} << 18);
  x.mask = xcr0 & ~(kAmxTiles | kXcompPkru);
  x.avx = (x.mask & kXcompAvx) != 0;
  constexpr uint64_t kAvx512 = kXcompOpmask | kXcompZmmHi256 | kXcompHi16Zmm;
  x.avx512 = (x.mask & kAvx512) == kAvx512;
  x.kreg64 = x.avx512 && avx512bw;
  x.mode = (c.d1_eax & 0x2) ? XStateSave::Mode::xsavec : XStateSave::Mode::xsave;
  x.xinuse = (c.d1_eax & 0x4) != 0;
  x.size = xstate_area_bytes(c, x.mask, x.mode);
  return x;
}

namespace {

XStateSave detect() noexcept {
  unsigned a, b, cx, d;
  if (!__get_cpuid(1, &a, &b, &cx, &d) || !(cx & bit_OSXSAVE)) return XStateSave{};
  uint32_t lo, hi;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const uint64_t xcr0 = (uint64_t{hi} << 32) | lo;
  CpuidXState c;
  __cpuid_count(0xd, 1, c.d1_eax, b, cx, d);
  for (unsigned i = 2; i < c.comp.size(); ++i) {
    if (!(xcr0 >> i & 1)) continue;
    __cpuid_count(0xd, i, a, b, cx, d);
    c.comp[i] = {a, b, (cx & 0x2) != 0};
  }
  const bool bw = __get_cpuid_count(7, 0, &a, &b, &cx, &d) && (b & bit_AVX512BW);
  return xstate_for(c, xcr0, bw);
}

}  // namespace

const XStateSave& host_xstate() noexcept {
  static const XStateSave x = detect();
  return x;
}

}  // namespace utramp::arch
