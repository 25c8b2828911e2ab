// The extended state's save area is sized from the components saved, not from what XCR0
// enables (arch/xstate.hpp: xstate_area_bytes).
#include <gtest/gtest.h>

#include <cpuid.h>

#include "arch/xstate.hpp"

namespace {

using utramp::arch::CpuidXState;
using utramp::arch::XStateSave;

// CPUID leaf 0xD of a Sapphire Rapids with AMX enabled in XCR0 (x87, SSE, AVX, opmask,
// ZMM_Hi256, Hi16_ZMM, PKRU, XTILECFG, XTILEDATA): subleaf 0's EBX is 11008, 8 KiB of it
// the tiles.
constexpr uint64_t kSprXcr0 = 0x602e7;

CpuidXState sapphire_rapids(bool xsavec) {
  CpuidXState c;
  c.d1_eax = 0x1 | 0x4 | (xsavec ? 0x2 : 0);  // XSAVEOPT, XINUSE, (XSAVEC)
  c.comp[2] = {256, 576, false};
  c.comp[5] = {64, 1088, false};
  c.comp[6] = {512, 1152, false};
  c.comp[7] = {1024, 1664, false};
  c.comp[9] = {8, 2688, false};
  c.comp[17] = {64, 2752, false};
  c.comp[18] = {8192, 2816, true};
  return c;
}

TEST(XState, StandardFormEndsAtTheLastSavedComponent) {
  const XStateSave x = utramp::arch::xstate_for(sapphire_rapids(false), kSprXcr0, true);
  EXPECT_EQ(x.mode, XStateSave::Mode::xsave);
  EXPECT_EQ(x.mask, 0xe7u);  // neither AMX tiles nor PKRU
  EXPECT_EQ(x.size, 1664u + 1024u);  // Hi16_ZMM's end, not 11008
}

TEST(XState, CompactedFormPacksTheSavedComponents) {
  const XStateSave x = utramp::arch::xstate_for(sapphire_rapids(true), kSprXcr0, true);
  EXPECT_EQ(x.mode, XStateSave::Mode::xsavec);
  EXPECT_EQ(x.size, 576u + 256u + 64u + 512u + 1024u);
  // A 64-byte aligned component starts on a multiple of 64: 576 + 8 (PKRU) -> 640.
  CpuidXState c;
  c.comp[9] = {8, 2688, false};
  c.comp[18] = {8192, 2816, true};
  EXPECT_EQ(utramp::arch::xstate_area_bytes(c, (1u << 9) | (1u << 18), XStateSave::Mode::xsavec),
            640u + 8192u);
  EXPECT_EQ(utramp::arch::xstate_area_bytes(c, 0x3, XStateSave::Mode::fxsave), 512u);
}

// This CPU: the area never exceeds what CPUID says all of XCR0 needs (standard form).
TEST(XState, HostWithinCpuidBound) {
  const XStateSave& x = utramp::arch::host_xstate();
  if (x.mode == XStateSave::Mode::fxsave) GTEST_SKIP() << "no XSAVE enabled";
  unsigned a, b, c, d;
  __cpuid_count(0xd, 0, a, b, c, d);
  EXPECT_LE(x.size, b);
  EXPECT_GE(x.size, 576u);
}

}  // namespace
