// Decoding with Zydis: lengths, control flow and RIP-relative operands of one instruction.
#include <Zydis/Zydis.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "arch/arch.hpp"
#include "arch/x86_64/zydis_util.hpp"
#include "common/hex.hpp"

namespace utramp::arch {

namespace x86 {

const ZydisDecoder& decoder() {
  static const ZydisDecoder d = [] {
    ZydisDecoder dec;
    ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    return dec;
  }();
  return d;
}

std::string format(const ZydisDecodedInstruction& insn, const ZydisDecodedOperand* ops,
                   uint64_t address) {
  static const ZydisFormatter f = [] {
    ZydisFormatter fm;
    ZydisFormatterInit(&fm, ZYDIS_FORMATTER_STYLE_INTEL);
    return fm;
  }();
  char buf[256];
  if (ZYAN_FAILED(ZydisFormatterFormatInstruction(&f, &insn, ops, insn.operand_count_visible,
                                                  buf, sizeof buf, address, nullptr)))
    return "(bad)";
  return buf;
}

}  // namespace x86

namespace {

Flow classify_flow(const ZydisDecodedInstruction& in, const ZydisDecodedOperand* ops,
                   bool relative) {
  switch (in.meta.category) {
    case ZYDIS_CATEGORY_UNCOND_BR:
      return relative ? Flow::jump : Flow::indirect_jump;
    case ZYDIS_CATEGORY_COND_BR:
      // Zydis files xend here too; with no target it falls through (or faults).
      return relative ? Flow::cond_jump : Flow::none;
    case ZYDIS_CATEGORY_CALL:
      return relative ? Flow::call : Flow::indirect_call;
    case ZYDIS_CATEGORY_RET:
      return Flow::ret;
    case ZYDIS_CATEGORY_SYSCALL:  // syscall, sysenter
      return Flow::syscall;
    case ZYDIS_CATEGORY_SYSRET:   // sysret, sysexit: #GP outside ring 0
      return Flow::trap;
    case ZYDIS_CATEGORY_INTERRUPT:
    case ZYDIS_CATEGORY_SYSTEM:
      if (in.mnemonic == ZYDIS_MNEMONIC_INT3 || in.mnemonic == ZYDIS_MNEMONIC_INT ||
          in.mnemonic == ZYDIS_MNEMONIC_INT1 || in.mnemonic == ZYDIS_MNEMONIC_INTO ||
          in.mnemonic == ZYDIS_MNEMONIC_HLT)
        return Flow::trap;
      return Flow::none;
    default:
      break;
  }
  if (in.mnemonic == ZYDIS_MNEMONIC_UD0 || in.mnemonic == ZYDIS_MNEMONIC_UD1 ||
      in.mnemonic == ZYDIS_MNEMONIC_UD2)
    return Flow::trap;
  (void)ops;
  return Flow::none;
}

}  // namespace

Result<Insn> decode(const uint8_t* code, size_t avail, uint64_t address) {
  ZydisDecodedInstruction in;
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
  const size_t n = std::min(avail, kMaxInsnLen);
  if (n == 0) return make_error(Errc::invalid_argument, "no bytes to decode");
  if (ZYAN_FAILED(ZydisDecoderDecodeFull(&x86::decoder(), code, n, &in, ops)))
    return make_error(Errc::bad_format,
                      fmt::format("cannot decode an instruction at {:#x} from bytes {}", address,
                                  hex_bytes({code, n})));
  Insn out;
  out.address = address;
  out.length = in.length;
  std::memcpy(out.bytes.data(), code, in.length);
  bool relative = false;
  for (unsigned i = 0; i < in.operand_count; ++i) {
    const ZydisDecodedOperand& op = ops[i];
    if (op.type == ZYDIS_OPERAND_TYPE_IMMEDIATE && op.imm.is_relative) {
      relative = true;
      ZyanU64 abs = 0;
      if (ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&in, &op, address, &abs))) out.target = abs;
    } else if (op.type == ZYDIS_OPERAND_TYPE_MEMORY && op.mem.base == ZYDIS_REGISTER_RIP) {
      out.rip_relative = true;
      ZyanU64 abs = 0;
      if (ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&in, &op, address, &abs))) out.target = abs;
    }
  }
  out.relative_branch = relative;
  out.flow = classify_flow(in, ops, relative);
  out.is_nop = in.mnemonic == ZYDIS_MNEMONIC_NOP;
  out.is_endbr64 = in.mnemonic == ZYDIS_MNEMONIC_ENDBR64;
  return out;
}

std::string Insn::text() const {
  ZydisDecodedInstruction in;
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
  if (ZYAN_FAILED(ZydisDecoderDecodeFull(&x86::decoder(), bytes.data(), length, &in, ops)))
    return "(bad)";
  return x86::format(in, ops, address);
}

std::string disassemble(std::span<const uint8_t> code, uint64_t address) {
  std::string out;
  size_t off = 0;
  while (off < code.size()) {
    auto r = decode(code.data() + off, code.size() - off, address + off);
    if (!r) {
      out += fmt::format("{:#x}: {}  (bad)\n", address + off, hex_bytes(code.subspan(off, 1)));
      ++off;
      continue;
    }
    out += fmt::format("{:#x}: {:<30} {}\n", r->address, hex_bytes(r->raw()), r->text());
    off += r->length;
  }
  return out;
}

namespace {

bool has_prefix(std::span<const uint8_t> code, std::initializer_list<uint8_t> bytes) {
  return code.size() >= bytes.size() && std::equal(bytes.begin(), bytes.end(), code.begin());
}

}  // namespace

size_t landing_pad_length(std::span<const uint8_t> code) noexcept {
  return has_prefix(code, {0xf3, 0x0f, 0x1e, 0xfa}) ? 4 : 0;  // endbr64
}

EntryPattern classify_entry(std::span<const uint8_t> code, uint64_t at) {
  using K = EntryPattern::Kind;
  auto first = code.empty() ? Result<Insn>(make_error(Errc::too_small, "no bytes"))
                            : decode(code.data(), code.size(), at);
  if (first && first->is_nop && first->length == kSiteLen) return {K::nop5, 5, 0};
  if (has_prefix(code, {0x90, 0x90, 0x90, 0x90, 0x90})) return {K::nop1x5, 5, 0};
  if (first && first->length == 5 && code[0] == 0xe8) return {K::call_rel32, 5, first->target};
  if (first && first->length == 6 && has_prefix(code, {0xff, 0x15}) && first->rip_relative)
    return {K::call_rip_indirect, 6, first->target};
  if (has_prefix(code, {0xeb, 0x09}) && code.size() >= 11) {  // jmp +9 over a 9-byte NOP
    auto nop = decode(code.data() + 2, code.size() - 2, at + 2);
    if (nop && nop->is_nop && nop->length == 9) return {K::xray_sled, 11, 0};
  }
  return {};
}

}  // namespace utramp::arch
