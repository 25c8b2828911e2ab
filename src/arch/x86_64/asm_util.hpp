// Internal to src/arch/x86_64: assembling with asmjit for a known base address.
#pragma once

#include <asmjit/x86.h>
#include <fmt/format.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "common/result.hpp"

namespace utramp::arch::x86 {

// Assembles what `body` emits as code that will run at `base`: every absolute target
// becomes a rel32 from where the code will actually be. Returns the finished bytes.
// `labels(code)` may read label offsets (code.labelOffset) once the code is final.
template <class Body, class Labels>
Result<std::vector<uint8_t>> assemble(uint64_t base, Body&& body, Labels&& labels) {
  asmjit::CodeHolder code;
  code.init(asmjit::Environment::host(), base);
  asmjit::x86::Assembler a(&code);
  body(a);
  auto fail = [](Errc c, asmjit::Error e) {
    return make_error(c, fmt::format("asmjit: {}", asmjit::DebugUtils::errorAsString(e)));
  };
  if (asmjit::Error e = code.flatten(); e != asmjit::kErrorOk) return fail(Errc::unsupported, e);
  if (asmjit::Error e = code.resolveUnresolvedLinks(); e != asmjit::kErrorOk)
    return fail(Errc::unsupported, e);
  if (asmjit::Error e = code.relocateToBase(base); e != asmjit::kErrorOk)
    return fail(Errc::out_of_range, e);
  std::vector<uint8_t> out(code.codeSize());
  if (asmjit::Error e = code.copyFlattenedData(out.data(), out.size(),
                                               asmjit::CopySectionFlags::kPadSectionBuffer);
      e != asmjit::kErrorOk)
    return fail(Errc::unsupported, e);
  labels(code);
  return out;
}

template <class Body>
Result<std::vector<uint8_t>> assemble(uint64_t base, Body&& body) {
  return assemble(base, std::forward<Body>(body), [](asmjit::CodeHolder&) {});
}

// A memory operand at a fixed offset from the thread pointer (initial-exec TLS).
inline asmjit::x86::Mem fs_mem(int64_t offset, uint32_t size) {
  asmjit::x86::Mem m = asmjit::x86::ptr_abs(static_cast<uint64_t>(offset), size);
  m.setSegment(asmjit::x86::fs);
  return m;
}

inline asmjit::x86::Mem fs_mem(int64_t offset, const asmjit::x86::Gp& index, uint32_t shift,
                               uint32_t size) {
  asmjit::x86::Mem m = asmjit::x86::ptr_abs(static_cast<uint64_t>(offset), index, shift, size);
  m.setSegment(asmjit::x86::fs);
  return m;
}

}  // namespace utramp::arch::x86
