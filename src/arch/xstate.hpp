// The CPU's extended register state (x87, SSE, AVX, AVX-512, ...) and how code that must
// keep all of it saves it: one definition for the generated images and stubs
// (arch/image.hpp: ImageSpec::preserve_all) and for probe handlers (arch/probe.hpp).
#pragma once

#include <array>
#include <cstdint>

namespace utramp::arch {

// XCR0 / XINUSE component bits (SDM vol. 1, 13.1).
inline constexpr uint64_t kXcompX87 = 1u << 0, kXcompSse = 1u << 1, kXcompAvx = 1u << 2,
                          kXcompOpmask = 1u << 5, kXcompZmmHi256 = 1u << 6,
                          kXcompHi16Zmm = 1u << 7, kXcompPkru = 1u << 9;

struct XStateSave {
  // XSAVEC (compacted; skips components in their initial state), XSAVE (standard form:
  // the header's reserved bytes must be zeroed before, or XRSTOR faults), or FXSAVE
  // (x87, MXCSR and xmm0-15 only) where the OS enables no XSAVE.
  enum class Mode : uint8_t { fxsave, xsave, xsavec };
  Mode mode = Mode::fxsave;
  uint32_t size = 512;  // bytes XSAVE/XSAVEC/FXSAVE write for `mask` (xstate_area_bytes)
  uint64_t mask = 0;    // the components saved: XCR0 without AMX tile state, whose use
                        // needs a per-process permission and an 8 KiB area, and without
                        // PKRU, which is not a register code computes in but the
                        // thread's memory access rights (changed only on purpose, as
                        // mprotect would change them; a program that does keeps it so)
  // What code that keeps the state with moves instead (the images' fast path,
  // arch/x86_64/image.cpp: save_state) needs to know:
  bool xinuse = false;  // XGETBV with ecx = 1 reads which components are in use
                        // (CPUID.(EAX=0Dh,ECX=1):EAX bit 2)
  bool avx = false;     // XCR0 enables the upper halves of ymm0-15 (vzeroupper exists)
  bool avx512 = false;  // XCR0 enables opmask, ZMM_Hi256 and Hi16_ZMM (zmm16-31, k0-7)
  bool kreg64 = false;  // AVX512BW: the opmask registers are 64 bits wide (kmovq)
  bool operator==(const XStateSave&) const = default;
};

// What CPUID leaf 0xD says of the CPU: subleaf 1's eax (bit 1 XSAVEC, bit 2 XINUSE),
// and for each component i >= 2 its subleaf i: eax = size, ebx = offset in the standard
// form, ecx bit 1 = 64-byte aligned in the compacted form.
struct CpuidXState {
  uint32_t d1_eax = 0;
  struct Component {
    uint32_t size = 0, offset = 0;
    bool align64 = false;
  };
  std::array<Component, 63> comp{};
};

// Bytes of a save area holding the components in `mask`: the standard form reaches the
// end of the highest component in it (CPUID 0xD.0 EBX would cover every component XCR0
// enables, AMX tiles' 8 KiB included, though they are not saved); the compacted form
// packs the components of `mask` in order after the 576-byte legacy area and header.
uint32_t xstate_area_bytes(const CpuidXState& c, uint64_t mask, XStateSave::Mode mode) noexcept;

// The state saved with XCR0 = `xcr0` on a CPU that answers CPUID 0xD with `c`.
XStateSave xstate_for(const CpuidXState& c, uint64_t xcr0, bool avx512bw) noexcept;

// This CPU's, read once (CPUID, XGETBV) and kept.
const XStateSave& host_xstate() noexcept;

}  // namespace utramp::arch
