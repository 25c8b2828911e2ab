// Emission with asmjit into memory that will live at a known address.
#include <asmjit/x86.h>
#include <fmt/format.h>
#include <ucontext.h>

#include <cstring>

#include "arch/arch.hpp"
#include "arch/x86_64/asm_util.hpp"

namespace utramp::arch {

namespace x86::testing {
__thread uint32_t t_fail_emit_at = 0;
std::atomic<bool> g_no_templates{false};
std::atomic<uint32_t> g_from_template{0};
void set_no_templates(bool on) noexcept { g_no_templates.store(on, std::memory_order_relaxed); }
uint32_t from_template() noexcept { return g_from_template.load(std::memory_order_relaxed); }
}

const SiteBytes kNop5 = {0x0f, 0x1f, 0x44, 0x00, 0x00};

namespace {

using asmjit::Imm;
using asmjit::Label;
namespace ax = asmjit::x86;

using x86::assemble;

// A 5-byte `call rel32` (E8) or `jmp rel32` (E9), written out directly: every attach and
// detach encodes a few of them, and asmjit (a CodeHolder each time) cost more than the
// rest of a patch batch's preparation. tests/unit/arch_emit_test.cpp checks their bytes
// and decodes them; the test hook fails them as it fails an asmjit instruction.
Result<SiteBytes> encode_site(uint64_t at, uint64_t target, const char* what, uint8_t opcode) {
  if (!rel32_reaches(at + kSiteLen, target))
    return make_error(Errc::out_of_range,
                      fmt::format("{} at {:#x} cannot reach {:#x} with rel32", what, at, target));
  if (x86::detail::failed_by_test())
    return make_error(Errc::unsupported, fmt::format("cannot emit {} at {:#x} to {:#x}: asmjit: {}",
                                                     what, at, target,
                                                     x86::detail::failed_by_test_text()));
  const auto rel = static_cast<int32_t>(static_cast<int64_t>(target - (at + kSiteLen)));
  SiteBytes out;
  out[0] = opcode;
  std::memcpy(out.data() + 1, &rel, sizeof rel);
  return out;
}

}  // namespace

Result<SiteBytes> encode_call(uint64_t at, uint64_t target) { return encode_site(at, target, "call", 0xe8); }

Result<SiteBytes> encode_jmp(uint64_t at, uint64_t target) { return encode_site(at, target, "jmp", 0xe9); }

Result<std::vector<uint8_t>> encode_jump_anywhere(uint64_t at, uint64_t target) {
  if (rel32_reaches(at + kSiteLen, target)) {
    auto b = encode_jmp(at, target);
    if (!b) return std::move(b).error();
    return std::vector<uint8_t>(b->begin(), b->end());
  }
  // jmp [rip+0]; .quad target
  return assemble(at, fmt::format("an absolute jmp at {:#x} to {:#x}", at, target),
                  [&](ax::Assembler& a) {
    Label slot = a.newLabel();
    a.jmp(ax::qword_ptr(slot));
    a.bind(slot);
    a.embedUInt64(target);
  });
}

Result<std::vector<uint8_t>> emit_import_stub(uint64_t base, uint64_t hook, uint64_t entry) {
  return assemble(base, fmt::format("the import stub at {:#x}", base), [&](ax::Assembler& a) {
    Label slot = a.newLabel();
    a.movabs(ax::r11, Imm(hook));
    a.jmp(ax::qword_ptr(slot));
    a.bind(slot);
    a.embedUInt64(entry);
  });
}

// Layout of the counting stub, reached by `call` from a site (the return address is at
// [rsp]); it touches only the flags, which no caller relies on across a call:
//
//   lock inc qword ptr [rip + counter]   ; or via rax when the counter is out of reach
//   ret
Result<std::vector<uint8_t>> emit_counting_stub(uint64_t base, uint64_t counter) {
  return assemble(base, fmt::format("the counting stub at {:#x}", base), [&](ax::Assembler& a) {
    if (rel32_reaches(base + 16, counter) && rel32_reaches(base, counter)) {
      a.lock().inc(ax::qword_ptr(counter));
    } else {
      a.push(ax::rax);
      a.mov(ax::rax, Imm(counter));
      a.lock().inc(ax::qword_ptr(ax::rax));
      a.pop(ax::rax);
    }
    a.ret();
  });
}

uint64_t ctx_ip(const ucontext_t* uc) noexcept { return uc->uc_mcontext.gregs[REG_RIP]; }
void ctx_set_ip(ucontext_t* uc, uint64_t ip) noexcept { uc->uc_mcontext.gregs[REG_RIP] = ip; }
uint64_t ctx_sp(const ucontext_t* uc) noexcept { return uc->uc_mcontext.gregs[REG_RSP]; }
void ctx_set_sp(ucontext_t* uc, uint64_t sp) noexcept { uc->uc_mcontext.gregs[REG_RSP] = sp; }
void ctx_emulate_call(ucontext_t* uc, uint64_t target, uint64_t return_to) noexcept {
  const uint64_t sp = ctx_sp(uc) - sizeof(uint64_t);
  *reinterpret_cast<uint64_t*>(sp) = return_to;
  ctx_set_sp(uc, sp);
  ctx_set_ip(uc, target);
}

}  // namespace utramp::arch
