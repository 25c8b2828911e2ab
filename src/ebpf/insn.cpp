#include "ebpf/insn.hpp"

#include <fmt/format.h>

#include <cstring>

namespace utramp::ebpf {

std::vector<Insn> insns_from_bytes(std::span<const uint8_t> bytes) {
  std::vector<Insn> out(bytes.size() / sizeof(Insn));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(Insn));
  return out;
}

std::vector<uint8_t> insns_to_bytes(std::span<const Insn> insns) {
  std::vector<uint8_t> out(insns.size() * sizeof(Insn));
  if (!out.empty()) std::memcpy(out.data(), insns.data(), out.size());
  return out;
}

std::string insn_hex(const Insn& insn) {
  uint8_t b[8];
  std::memcpy(b, &insn, 8);
  return fmt::format("{:02x} {:02x} {:02x} {:02x} {:02x} {:02x} {:02x} {:02x}", b[0], b[1],
                     b[2], b[3], b[4], b[5], b[6], b[7]);
}

const char* alu_name(uint8_t o) {
  using namespace op;
  switch (o) {
    case kAdd: return "add";
    case kSub: return "sub";
    case kMul: return "mul";
    case kDiv: return "div";
    case kOr: return "or";
    case kAnd: return "and";
    case kLsh: return "lsh";
    case kRsh: return "rsh";
    case kNeg: return "neg";
    case kMod: return "mod";
    case kXor: return "xor";
    case kMov: return "mov";
    case kArsh: return "arsh";
    default: return nullptr;
  }
}

const char* jmp_name(uint8_t o) {
  using namespace op;
  switch (o) {
    case kJeq: return "jeq";
    case kJgt: return "jgt";
    case kJge: return "jge";
    case kJset: return "jset";
    case kJne: return "jne";
    case kJsgt: return "jsgt";
    case kJsge: return "jsge";
    case kJlt: return "jlt";
    case kJle: return "jle";
    case kJslt: return "jslt";
    case kJsle: return "jsle";
    default: return nullptr;
  }
}

namespace {

using namespace op;

const char* size_suffix(uint8_t code) {
  switch (size(code)) {
    case kB: return "b";
    case kH: return "h";
    case kW: return "w";
    default: return "dw";
  }
}

std::string mem(uint8_t reg, int16_t off) {
  if (off == 0) return fmt::format("[%r{}]", reg);
  return fmt::format("[%r{}{:+d}]", reg, off);
}

std::string rel(int64_t off) { return fmt::format("{:+d}", off); }

std::string raw(const Insn& i) {
  return fmt::format(".insn {:#04x} {} {} {} {}", i.code, unsigned(i.dst), unsigned(i.src), i.off,
                     i.imm);
}

}  // namespace

std::string disassemble_insn(std::span<const Insn> insns, size_t idx) {
  const Insn& i = insns[idx];
  const uint8_t c = i.code;
  switch (cls(c)) {
    case kAlu:
    case kAlu64: {
      const bool is64 = cls(c) == kAlu64;
      const char* w = is64 ? "" : "32";
      const uint8_t o = alu_op(c);
      if (o == kEnd) {
        if (is64) return fmt::format("bswap{} %r{}", i.imm, unsigned(i.dst));
        return fmt::format("{}{} %r{}", src_bit(c) == kToBe ? "be" : "le", i.imm, unsigned(i.dst));
      }
      if (o == kNeg) return fmt::format("neg{} %r{}", w, unsigned(i.dst));
      const char* name = alu_name(o);
      if (!name) return raw(i);
      std::string mn = name;
      if ((o == kDiv || o == kMod) && i.off == 1) mn = "s" + mn;
      if (o == kMov && src_bit(c) == kX && i.off != 0) {
        if (i.off != 8 && i.off != 16 && i.off != 32) return raw(i);
        mn = fmt::format("movsx{}{}", i.off, is64 ? "64" : "32");
      }
      else
        mn += w;
      if (src_bit(c) == kX) return fmt::format("{} %r{}, %r{}", mn, unsigned(i.dst), unsigned(i.src));
      return fmt::format("{} %r{}, {}", mn, unsigned(i.dst), i.imm);
    }
    case kJmp:
    case kJmp32: {
      const bool is32 = cls(c) == kJmp32;
      const uint8_t o = jmp_op(c);
      if (c == kJaOp) return fmt::format("ja {}", rel(i.off));
      if (c == kJa32Op) return fmt::format("ja32 {}", rel(i.imm));
      if (c == kExitOp) return "exit";
      if (c == kCallOp) {
        if (i.src == kCallLocal) return fmt::format("call local {}", rel(i.imm));
        if (i.src == kCallHelper) return fmt::format("call {}", i.imm);
        return raw(i);
      }
      if (c == kCallxOp) return fmt::format("call %r{}", unsigned(i.dst));
      const char* name = jmp_name(o);
      if (!name) return raw(i);
      const char* w = is32 ? "32" : "";
      if (src_bit(c) == kX)
        return fmt::format("{}{} %r{}, %r{}, {}", name, w, unsigned(i.dst), unsigned(i.src), rel(i.off));
      return fmt::format("{}{} %r{}, {}, {}", name, w, unsigned(i.dst), i.imm, rel(i.off));
    }
    case kLd:
      if (c == kLddw && idx + 1 < insns.size())
        return fmt::format("lddw %r{}, {:#x}", unsigned(i.dst), imm64(insns, idx));
      return raw(i);
    case kLdx:
      if (mode(c) == kMem)
        return fmt::format("ldx{} %r{}, {}", size_suffix(c), unsigned(i.dst), mem(i.src, i.off));
      if (mode(c) == kMemSx)
        return fmt::format("ldxs{} %r{}, {}", size_suffix(c), unsigned(i.dst), mem(i.src, i.off));
      return raw(i);
    case kSt:
      if (mode(c) == kMem)
        return fmt::format("st{} {}, {}", size_suffix(c), mem(i.dst, i.off), i.imm);
      return raw(i);
    case kStx: {
      if (mode(c) == kMem)
        return fmt::format("stx{} {}, %r{}", size_suffix(c), mem(i.dst, i.off), unsigned(i.src));
      if (mode(c) != kAtomic || (size(c) != kW && size(c) != kDW)) return raw(i);
      const char* w = size(c) == kW ? "32" : "";
      const char* name = nullptr;
      switch (i.imm & ~kFetch) {
        case kAtomicAdd: name = "add"; break;
        case kAtomicOr: name = "or"; break;
        case kAtomicAnd: name = "and"; break;
        case kAtomicXor: name = "xor"; break;
        default: break;
      }
      if (i.imm == kXchg) return fmt::format("lock xchg{} {}, %r{}", w, mem(i.dst, i.off), unsigned(i.src));
      if (i.imm == kCmpxchg)
        return fmt::format("lock cmpxchg{} {}, %r{}", w, mem(i.dst, i.off), unsigned(i.src));
      if (!name) return raw(i);
      return fmt::format("lock {}{}{} {}, %r{}", (i.imm & kFetch) ? "fetch " : "", name, w,
                         mem(i.dst, i.off), unsigned(i.src));
    }
  }
  return raw(i);
}

std::string disassemble(std::span<const Insn> insns) {
  std::string out;
  for (size_t i = 0; i < insns.size(); ++i) {
    out += fmt::format("{:4}: {}\n", i, disassemble_insn(insns, i));
    if (insns[i].code == op::kLddw) ++i;  // the second slot is part of this line
  }
  return out;
}

}  // namespace utramp::ebpf
