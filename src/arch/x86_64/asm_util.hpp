// Internal to src/arch/x86_64: assembling with asmjit for a known base address.
#pragma once

#include <atomic>

#include <asmjit/x86.h>
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "arch/arch.hpp"
#include "common/result.hpp"

namespace utramp::arch::x86 {

// The first error asmjit reports while code is emitted: an instruction it cannot
// encode (an operand out of range, a form that does not exist), a label bound twice.
// asmjit returns such an error from the emit call and leaves the instruction out; the
// emitters do not check each call. Instead the error is kept here and emission goes
// on (ubpf's sticky error: emit freely, check once), and assemble() reports it.
class StickyError : public asmjit::ErrorHandler {
 public:
  void handleError(asmjit::Error err, const char* message, asmjit::BaseEmitter*) override {
    if (first != asmjit::kErrorOk) return;
    first = err;
    // With logging (Debian's asmjit has it) the message names the instruction.
    text = message && *message ? message : asmjit::DebugUtils::errorAsString(err);
  }
  asmjit::Error first = asmjit::kErrorOk;
  std::string text;
};

namespace testing {
// Test hook: when non-zero, the n-th instruction this thread emits from now on, through
// any number of assemble() calls, fails as one asmjit cannot encode would: reported to
// the error handler and left out; the hook is then 0 again. Tests use it to check that
// an emitter, and whatever calls it, reports what could not be emitted. Nothing else
// sets it: emission pays one thread-local test per instruction.
// (Defined once, in emit.cpp: a test and the library must see the same variable.)
extern __thread uint32_t t_fail_emit_at;
// Test hooks of the templates (image.cpp, "Templates"): when set, every stub and image is
// emitted by asmjit; and how many were made from a template, by every thread. Process-wide,
// not thread-local: the agent's static TLS has a budget (unit_boundary.agent_tls). Tests
// use the functions (a test executable's copy of a library's variable is not the one the
// library reads).
extern std::atomic<bool> g_no_templates;
extern std::atomic<uint32_t> g_from_template;
void set_no_templates(bool on) noexcept;
uint32_t from_template() noexcept;
}  // namespace testing

namespace detail {
// One instruction about to be emitted: whether the test hook above fails it.
inline bool failed_by_test() { return testing::t_fail_emit_at != 0 && --testing::t_fail_emit_at == 0; }
// The text such a failure is reported with (after "asmjit: ").
inline std::string failed_by_test_text() {
  return fmt::format("{} (failed by a test)",
                     asmjit::DebugUtils::errorAsString(asmjit::kErrorInvalidInstruction));
}

// The assembler assemble() hands to emitters: asmjit's, with the test hook above.
class Assembler final : public asmjit::x86::Assembler {
 public:
  explicit Assembler(asmjit::CodeHolder* code) : asmjit::x86::Assembler(code) {}
  asmjit::Error _emit(asmjit::InstId id, const asmjit::Operand_& o0, const asmjit::Operand_& o1,
                      const asmjit::Operand_& o2, const asmjit::Operand_* ext) override {
    if (failed_by_test()) {
      resetInstOptions();
      resetExtraReg();
      return reportError(asmjit::DebugUtils::errored(asmjit::kErrorInvalidInstruction),
                         failed_by_test_text().c_str());
    }
    return asmjit::x86::Assembler::_emit(id, o0, o1, o2, ext);
  }
};

inline Errc errc_of(asmjit::Error e) {
  switch (e) {
    case asmjit::kErrorInvalidDisplacement:
    case asmjit::kErrorInvalidImmediate:
    case asmjit::kErrorInvalidAddress:
    case asmjit::kErrorInvalidAddress64Bit:
    case asmjit::kErrorInvalidAddress64BitZeroExtension:
    case asmjit::kErrorRelocOffsetOutOfRange:
      return Errc::out_of_range;
    default:
      return Errc::unsupported;
  }
}
}  // namespace detail

// Assembles what `body` emits as code that will run at `base`: every absolute target
// becomes a rel32 from where the code will actually be. Returns the finished bytes, or
// the first error asmjit reported, as "cannot emit WHAT: asmjit: ERROR: INSTRUCTION".
// `labels(code)` may read label offsets (code.labelOffset) once the code is final.
template <class Body, class Labels>
Result<std::vector<uint8_t>> assemble(uint64_t base, std::string_view what, Body&& body,
                                      Labels&& labels) {
  asmjit::CodeHolder code;
  StickyError sticky;
  code.init(asmjit::Environment::host(), base);
  code.setErrorHandler(&sticky);
  detail::Assembler a(&code);
  body(static_cast<asmjit::x86::Assembler&>(a));
  auto fail = [&](asmjit::Error e, std::string_view text) {
    return make_error(detail::errc_of(e), fmt::format("cannot emit {}: asmjit: {}", what, text));
  };
  if (sticky.first != asmjit::kErrorOk) return fail(sticky.first, sticky.text);
  // The CodeHolder's own steps return their errors without calling the handler.
  auto step = [&](asmjit::Error e) {
    if (e != asmjit::kErrorOk) sticky.handleError(e, nullptr, nullptr);
    return sticky.first == asmjit::kErrorOk;
  };
  if (!step(code.flatten()) || !step(code.resolveUnresolvedLinks()) ||
      !step(code.relocateToBase(base)))
    return fail(sticky.first, sticky.text);
  std::vector<uint8_t> out(code.codeSize());
  if (!step(code.copyFlattenedData(out.data(), out.size(),
                                   asmjit::CopySectionFlags::kPadSectionBuffer)))
    return fail(sticky.first, sticky.text);
  labels(code);
  return out;
}

template <class Body>
Result<std::vector<uint8_t>> assemble(uint64_t base, std::string_view what, Body&& body) {
  return assemble(base, what, std::forward<Body>(body), [](asmjit::CodeHolder&) {});
}

// Generated code is emitted before its final size is known: a rel32 is used only when
// it reaches `target` from anywhere in a block of `bytes` at `base` (the bound each
// emitter states: 1 MiB for stubs, images and detours, 1 GiB for eBPF programs).
inline constexpr uint64_t kBlockReach = uint64_t{1} << 20;
inline bool rel32_reaches_block(uint64_t base, uint64_t bytes, uint64_t target) {
  return rel32_reaches(base, target) && rel32_reaches(base + bytes, target);
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
