// arch/xstate.hpp: what this CPU's extended state is and how big its save area is.
#include "arch/xstate.hpp"

#include <cpuid.h>

namespace utramp::arch {

namespace {

XStateSave detect() noexcept {
  XStateSave x;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return x;
  uint32_t lo, hi;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  constexpr uint64_t kAmxTiles = (uint64_t{1} << 17) | (uint64_t{1} << 18);
  x.mask = ((uint64_t{hi} << 32) | lo) & ~(kAmxTiles | kXcompPkru);
  x.avx = (x.mask & kXcompAvx) != 0;
  constexpr uint64_t kAvx512 = kXcompOpmask | kXcompZmmHi256 | kXcompHi16Zmm;
  x.avx512 = (x.mask & kAvx512) == kAvx512;
  if (x.avx512 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) x.kreg64 = (b & bit_AVX512BW) != 0;
  // CPUID 0xd.0: ebx = bytes of the standard-form area for what XCR0 enables now, an
  // upper bound of the compacted form of any subset.
  __cpuid_count(0xd, 0, a, b, c, d);
  x.size = b;
  __cpuid_count(0xd, 1, a, b, c, d);
  x.mode = (a & 0x2) ? XStateSave::Mode::xsavec : XStateSave::Mode::xsave;
  x.xinuse = (a & 0x4) != 0;
  return x;
}

}  // namespace

const XStateSave& host_xstate() noexcept {
  static const XStateSave x = detect();
  return x;
}

}  // namespace utramp::arch
