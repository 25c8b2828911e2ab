#include "ebpf/check.hpp"

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

namespace utramp::ebpf {

namespace {

using namespace op;

// What to use instead of a kernel helper utramp does not provide, where there is a way.
std::string helper_hint(std::string_view kname) {
  if (kname == "bpf_get_current_task" || kname == "bpf_get_current_task_btf")
    return "there is no kernel task in user space: bpf_get_current_pid_tgid and bpf_get_current_comm describe the "
           "calling thread";
  return {};
}

class Checker {
 public:
  Checker(std::span<const Insn> insns, const HelperTable* helpers) : p_(insns), helpers_(helpers) {}

  Result<void> run();

 private:
  Error fail(Errc code, size_t i, const std::string& why) const {
    return make_error(code, fmt::format("insn {} ({}; {}): {}", i, disassemble_insn(p_, i),
                                        insn_hex(p_[i]), why));
  }
  Result<void> zero(size_t i, const char* field, int64_t v) const {
    if (v == 0) return {};
    return fail(Errc::bad_format, i, fmt::format("reserved field {} must be 0, is {}", field, v));
  }
  Result<void> reg(size_t i, const char* field, uint8_t r, bool written) const {
    if (r > kFp) return fail(Errc::bad_format, i, fmt::format("invalid register {}=r{}", field, r));
    if (written && r == kFp) return fail(Errc::bad_format, i, "r10 (the frame pointer) is read-only");
    return {};
  }
  // Insn i's target `t` (jump_target(), or a local call's i + 1 + imm).
  Result<void> target(size_t i, int64_t t, const char* what) const {
    if (t < 0 || t >= static_cast<int64_t>(p_.size()))
      return fail(Errc::out_of_range, i,
                  fmt::format("{} target {} outside the program (0..{})", what, t, p_.size() - 1));
    if (second_slot_[static_cast<size_t>(t)])
      return fail(Errc::bad_format, i,
                  fmt::format("{} target {} is the second slot of a lddw", what, t));
    return {};
  }
  Result<void> alu(size_t i);
  Result<void> jmp(size_t i);
  Result<void> mem(size_t i);

  std::span<const Insn> p_;
  const HelperTable* helpers_;
  std::vector<bool> second_slot_;
};

Result<void> Checker::alu(size_t i) {
  const Insn& n = p_[i];
  const bool is64 = cls(n.code) == kAlu64;
  const uint8_t o = alu_op(n.code);
  UTRAMP_TRY(reg(i, "dst", n.dst, true));
  if (o == kEnd) {
    if (is64 && src_bit(n.code)) return fail(Errc::bad_format, i, "unknown opcode (bswap has no X form)");
    UTRAMP_TRY(zero(i, "src", n.src));
    UTRAMP_TRY(zero(i, "off", n.off));
    if (n.imm != 16 && n.imm != 32 && n.imm != 64)
      return fail(Errc::bad_format, i, fmt::format("byte swap width {} is not 16, 32 or 64", n.imm));
    return {};
  }
  if (o == kNeg) {
    if (src_bit(n.code)) return fail(Errc::bad_format, i, "unknown opcode (neg has no X form)");
    UTRAMP_TRY(zero(i, "src", n.src));
    UTRAMP_TRY(zero(i, "off", n.off));
    return zero(i, "imm", n.imm);
  }
  if (o > kArsh) return fail(Errc::bad_format, i, "unknown opcode");
  if (src_bit(n.code) == kK) UTRAMP_TRY(zero(i, "src", n.src));
  else {
    UTRAMP_TRY(reg(i, "src", n.src, false));
    UTRAMP_TRY(zero(i, "imm", n.imm));
  }
  if (o == kDiv || o == kMod) {
    if (n.off != 0 && n.off != 1)
      return fail(Errc::bad_format, i, fmt::format("off of a division must be 0 or 1 (signed), is {}", n.off));
    return {};
  }
  if (o == kMov && src_bit(n.code) == kX && n.off != 0) {
    if (n.off == 8 || n.off == 16 || (is64 && n.off == 32)) return {};
    return fail(Errc::bad_format, i, fmt::format("sign-extension width {} of movsx is not {}", n.off,
                                                 is64 ? "8, 16 or 32" : "8 or 16"));
  }
  return zero(i, "off", n.off);
}

Result<void> Checker::jmp(size_t i) {
  const Insn& n = p_[i];
  const bool is32 = cls(n.code) == kJmp32;
  const uint8_t o = jmp_op(n.code);
  switch (o) {
    case kJa:
      if (src_bit(n.code)) return fail(Errc::bad_format, i, "unknown opcode (ja has no X form)");
      UTRAMP_TRY(zero(i, "dst", n.dst));
      UTRAMP_TRY(zero(i, "src", n.src));
      if (is32) {
        UTRAMP_TRY(zero(i, "off", n.off));
        return target(i, jump_target(i, n), "jump");
      }
      UTRAMP_TRY(zero(i, "imm", n.imm));
      return target(i, jump_target(i, n), "jump");
    case kCall:
      if (is32) return fail(Errc::bad_format, i, "unknown opcode (call is a JMP-class instruction)");
      UTRAMP_TRY(zero(i, "off", n.off));
      if (src_bit(n.code)) {  // callx: helper id in dst
        UTRAMP_TRY(zero(i, "src", n.src));
        UTRAMP_TRY(zero(i, "imm", n.imm));
        return reg(i, "dst", n.dst, false);
      }
      UTRAMP_TRY(zero(i, "dst", n.dst));
      if (n.src == kCallLocal) return target(i, static_cast<int64_t>(i) + 1 + n.imm, "local call");
      if (n.src == kCallKfunc)
        return fail(Errc::unsupported, i, "kernel function calls (kfuncs) are not supported");
      if (n.src != kCallHelper)
        return fail(Errc::bad_format, i, fmt::format("unknown call kind src={}", unsigned(n.src)));
      if (const HelperInfo* h = helpers_ ? helpers_->find(static_cast<uint32_t>(n.imm)) : nullptr;
          !h || !h->fn) {
        const uint32_t id = static_cast<uint32_t>(n.imm);
        std::string_view kname = kernel_helper_name(id);
        const std::string hint = helper_hint(kname);
        return fail(Errc::not_found, i,
                    kname.empty() ? fmt::format("unknown helper {} (no kernel helper has that number)", n.imm)
                                  : fmt::format("unknown helper {} ({}): not provided here{}{}", n.imm, kname,
                                                hint.empty() ? "" : "; ", hint));
      }
      return {};
    case kExit:
      if (is32 || src_bit(n.code)) return fail(Errc::bad_format, i, "unknown opcode");
      UTRAMP_TRY(zero(i, "dst", n.dst));
      UTRAMP_TRY(zero(i, "src", n.src));
      UTRAMP_TRY(zero(i, "off", n.off));
      return zero(i, "imm", n.imm);
    case kJeq: case kJgt: case kJge: case kJset: case kJne: case kJsgt: case kJsge:
    case kJlt: case kJle: case kJslt: case kJsle:
      UTRAMP_TRY(reg(i, "dst", n.dst, false));
      if (src_bit(n.code) == kK) UTRAMP_TRY(zero(i, "src", n.src));
      else {
        UTRAMP_TRY(reg(i, "src", n.src, false));
        UTRAMP_TRY(zero(i, "imm", n.imm));
      }
      return target(i, jump_target(i, n), "jump");
    default:
      return fail(Errc::bad_format, i, "unknown opcode");
  }
}

Result<void> Checker::mem(size_t i) {
  const Insn& n = p_[i];
  switch (cls(n.code)) {
    case kLd:
      if (n.code != kLddw)
        return fail(Errc::unsupported, i, "legacy packet access (ld abs/ind) is not supported");
      UTRAMP_TRY(reg(i, "dst", n.dst, true));
      if (n.src != 0)
        return fail(Errc::bad_format, i,
                    fmt::format("lddw with src={} (a map or BTF reference) the loader has not resolved",
                                unsigned(n.src)));
      UTRAMP_TRY(zero(i, "off", n.off));
      if (i + 1 >= p_.size()) return fail(Errc::bad_format, i, "lddw without its second slot");
      {
        const Insn& h = p_[i + 1];
        if (h.code || h.dst || h.src || h.off)
          return fail(Errc::bad_format, i,
                      fmt::format("second slot of lddw ({}) must have only imm set", insn_hex(h)));
      }
      return {};
    case kLdx:
      if (mode(n.code) != kMem && !(mode(n.code) == kMemSx && size(n.code) != kDW))
        return fail(Errc::bad_format, i, "unknown opcode");
      UTRAMP_TRY(reg(i, "dst", n.dst, true));
      UTRAMP_TRY(reg(i, "src", n.src, false));
      return zero(i, "imm", n.imm);
    case kSt:
      if (mode(n.code) != kMem) return fail(Errc::bad_format, i, "unknown opcode");
      UTRAMP_TRY(reg(i, "dst", n.dst, false));
      return zero(i, "src", n.src);
    default:  // kStx
      UTRAMP_TRY(reg(i, "dst", n.dst, false));
      if (mode(n.code) == kMem) {
        UTRAMP_TRY(reg(i, "src", n.src, false));
        return zero(i, "imm", n.imm);
      }
      if (mode(n.code) != kAtomic || (size(n.code) != kW && size(n.code) != kDW))
        return fail(Errc::bad_format, i, "unknown opcode");
      switch (n.imm) {
        case kAtomicAdd: case kAtomicOr: case kAtomicAnd: case kAtomicXor:
          return reg(i, "src", n.src, false);
        case kAtomicAdd | kFetch: case kAtomicOr | kFetch: case kAtomicAnd | kFetch:
        case kAtomicXor | kFetch: case kXchg: case kCmpxchg:
          return reg(i, "src", n.src, true);  // the old value goes to src (cmpxchg: r0)
        default:
          return fail(Errc::bad_format, i, fmt::format("unknown atomic operation {:#x}", n.imm));
      }
  }
}

Result<void> Checker::run() {
  if (p_.empty()) return make_error(Errc::bad_format, "program has no instructions");
  if (p_.size() > kMaxInsns)
    return make_error(Errc::too_big, fmt::format("program has {} instructions, more than {}",
                                                 p_.size(), kMaxInsns));
  second_slot_.assign(p_.size(), false);
  for (size_t i = 0; i < p_.size(); ++i)
    if (p_[i].code == kLddw && i + 1 < p_.size()) second_slot_[++i] = true;
  for (size_t i = 0; i < p_.size(); ++i) {
    const Insn& n = p_[i];
    if (op::is_alu(n.code)) UTRAMP_TRY(alu(i));
    else if (op::is_jmp(n.code)) UTRAMP_TRY(jmp(i));
    else UTRAMP_TRY(mem(i));
    const bool ends = n.code == kExitOp || n.code == kJaOp || n.code == kJa32Op;
    const size_t next = i + (n.code == kLddw ? 2 : 1);
    if (!ends && next >= p_.size())
      return fail(Errc::bad_format, i, "execution falls off the end of the program");
    if (n.code == kLddw) ++i;
  }
  return {};
}

}  // namespace

Result<void> check_program(std::span<const Insn> insns, const HelperTable* helpers) {
  return Checker(insns, helpers).run();
}

}  // namespace utramp::ebpf
