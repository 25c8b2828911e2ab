// The CPU's extended register state (x87, SSE, AVX, AVX-512, ...) and how code that must
// keep all of it saves it: one definition for the generated images and stubs
// (arch/image.hpp: ImageSpec::preserve_all) and for probe handlers (arch/probe.hpp).
#pragma once

#include <cstdint>

namespace utramp::arch {

struct XStateSave {
  // XSAVEC (compacted; skips components in their initial state), XSAVE (standard form:
  // the header's reserved bytes must be zeroed before, or XRSTOR faults), or FXSAVE
  // (x87, MXCSR and xmm0-15 only) where the OS enables no XSAVE.
  enum class Mode : uint8_t { fxsave, xsave, xsavec };
  Mode mode = Mode::fxsave;
  uint32_t size = 512;  // bytes of the save area (64-byte aligned)
  uint64_t mask = 0;    // the components saved: XCR0 without AMX tile state, whose use
                        // needs a per-process permission and an 8 KiB area
};

// This CPU's, read once (CPUID, XGETBV) and kept.
const XStateSave& host_xstate() noexcept;

}  // namespace utramp::arch
