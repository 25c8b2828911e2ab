// Relocation of whole instructions to a new address.
//
// Two passes: the first decodes the run and fixes every output length (relative
// branches always become their rel32 form, everything else keeps its length), the
// second emits. Knowing all lengths up front lets a branch inside the run that targets
// another instruction of the run be redirected to that instruction's copy.
#include <Zydis/Zydis.h>
#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <optional>

#include "arch/arch.hpp"
#include "arch/x86_64/zydis_util.hpp"
#include "common/hex.hpp"

namespace utramp::arch {

bool rel32_reaches(uint64_t next_ip, uint64_t target) noexcept {
  const int64_t d = static_cast<int64_t>(target - next_ip);
  return d >= std::numeric_limits<int32_t>::min() && d <= std::numeric_limits<int32_t>::max();
}

Window rel32_window(uint64_t addr) noexcept {
  // Leave a margin so that code anywhere in a block of up to 1 MiB inside the window
  // reaches `addr` and is reached from it, in both directions.
  constexpr uint64_t kReach = (uint64_t{1} << 31) - (uint64_t{1} << 20);
  constexpr uint64_t kUserTop = uint64_t{1} << 47;
  constexpr uint64_t kUserBottom = uint64_t{1} << 16;
  Window w;
  w.lo = addr > kUserBottom + kReach ? addr - kReach : kUserBottom;
  w.hi = addr + kReach < kUserTop ? addr + kReach : kUserTop;
  return w;
}

namespace {

struct Decoded {
  ZydisDecodedInstruction in;
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
  uint64_t src = 0;      // source address
  uint32_t src_off = 0;  // offset in the source run
  uint32_t out_len = 0;  // length of the relocated form
  bool branch = false;   // relative immediate
  bool riprel = false;   // RIP-relative memory operand
  uint64_t target = 0;   // absolute branch target
};

bool rel8_only(ZydisMnemonic m) {
  switch (m) {
    case ZYDIS_MNEMONIC_LOOP:
    case ZYDIS_MNEMONIC_LOOPE:
    case ZYDIS_MNEMONIC_LOOPNE:
    case ZYDIS_MNEMONIC_JRCXZ:
    case ZYDIS_MNEMONIC_JECXZ:
    case ZYDIS_MNEMONIC_JCXZ:
      return true;
    default:
      return false;
  }
}

std::string describe(const Decoded& d, std::span<const uint8_t> code) {
  return fmt::format("'{}' at {:#x} (bytes {})", x86::format(d.in, d.ops, d.src), d.src,
                     hex_bytes(code.subspan(d.src_off, d.in.length)));
}


// Re-encodes a relative branch at `at` to `target` in its rel32 form, keeping its
// prefixes. Writes to `out` when given; returns the length, or nothing when there is no
// rel32 form or `target` is out of its reach.
//
// The encoder only picks the form; the displacement is written here from the encoded
// length. Zydis 4.0.0's ZydisEncoderEncodeInstructionAbsolute leaves a BND prefix out of
// the length it subtracts, so `bnd jmp`/`bnd call` landed one byte past their target
// (zyantific/zydis#463, fixed after 4.0.0).
std::optional<uint32_t> encode_branch(const Decoded& d, uint64_t at, uint64_t target,
                                      uint8_t* out) {
  ZydisEncoderRequest req;
  if (ZYAN_FAILED(ZydisEncoderDecodedInstructionToEncoderRequest(&d.in, d.ops,
                                                                 d.in.operand_count_visible, &req)))
    return std::nullopt;
  req.branch_width = ZYDIS_BRANCH_WIDTH_32;
  req.branch_type = ZYDIS_BRANCH_TYPE_NEAR;
  for (unsigned k = 0; k < req.operand_count; ++k)
    if (req.operands[k].type == ZYDIS_OPERAND_TYPE_IMMEDIATE) req.operands[k].imm.s = 0;
  uint8_t buf[ZYDIS_MAX_INSTRUCTION_LENGTH];
  ZyanUSize len = sizeof buf;
  if (ZYAN_FAILED(ZydisEncoderEncodeInstruction(&req, buf, &len))) return std::nullopt;
  ZydisDecodedInstruction enc;
  if (ZYAN_FAILED(ZydisDecoderDecodeInstruction(&x86::decoder(), nullptr, buf, len, &enc)) ||
      enc.length != len || !enc.raw.imm[0].is_relative || enc.raw.imm[0].size != 32)
    return std::nullopt;
  const int64_t rel = static_cast<int64_t>(target - (at + len));
  if (rel < std::numeric_limits<int32_t>::min() || rel > std::numeric_limits<int32_t>::max())
    return std::nullopt;
  if (out) {
    const int32_t rel32 = static_cast<int32_t>(rel);
    std::memcpy(out, buf, len);
    std::memcpy(out + enc.raw.imm[0].offset, &rel32, sizeof rel32);
  }
  return static_cast<uint32_t>(len);
}

}  // namespace

Result<Relocated> relocate(std::span<const uint8_t> code, uint64_t from, uint64_t to) {
  std::vector<Decoded> run;
  // Pass 1: decode, classify, fix output lengths.
  for (size_t off = 0; off < code.size();) {
    Decoded d;
    d.src = from + off;
    d.src_off = static_cast<uint32_t>(off);
    if (ZYAN_FAILED(ZydisDecoderDecodeFull(&x86::decoder(), code.data() + off, code.size() - off,
                                           &d.in, d.ops)))
      return make_error(Errc::not_instruction_boundary,
                        fmt::format("bytes {} at {:#x} do not end on a whole instruction",
                                    hex_bytes(code.subspan(off)), from + off));
    for (unsigned i = 0; i < d.in.operand_count; ++i) {
      const auto& op = d.ops[i];
      if (op.type == ZYDIS_OPERAND_TYPE_IMMEDIATE && op.imm.is_relative) {
        d.branch = true;
        ZyanU64 abs = 0;
        ZydisCalcAbsoluteAddress(&d.in, &op, d.src, &abs);
        d.target = abs;
      } else if (op.type == ZYDIS_OPERAND_TYPE_MEMORY && op.mem.base == ZYDIS_REGISTER_RIP) {
        d.riprel = true;
      }
    }
    if (d.branch) {
      if (rel8_only(d.in.mnemonic))
        return make_error(Errc::unsupported,
                          fmt::format("cannot relocate {}: it has only a rel8 form",
                                      describe(d, code)));
      // Refused by contract (arch.hpp): the transaction it begins would span the
      // trampoline's exit jump, which nothing here has checked.
      if (d.in.mnemonic == ZYDIS_MNEMONIC_XBEGIN)
        return make_error(Errc::unsupported,
                          fmt::format("cannot relocate {}: transaction start", describe(d, code)));
      if (d.in.meta.category != ZYDIS_CATEGORY_UNCOND_BR &&
          d.in.meta.category != ZYDIS_CATEGORY_CALL && d.in.meta.category != ZYDIS_CATEGORY_COND_BR)
        return make_error(Errc::unsupported,
                          fmt::format("cannot relocate {}: relative operand of an unsupported kind",
                                      describe(d, code)));
      // The rel32 form's length does not depend on where it goes: measure it here.
      auto len = encode_branch(d, d.src, d.target, nullptr);
      if (!len)
        return make_error(Errc::unsupported,
                          fmt::format("cannot relocate {}: no rel32 form", describe(d, code)));
      d.out_len = *len;
    } else {
      d.out_len = d.in.length;
    }
    off += d.in.length;
    run.push_back(d);
  }

  // Where each source instruction lands.
  Relocated out;
  uint32_t pos = 0;
  for (const auto& d : run) {
    out.insn_offsets.push_back(pos);
    pos += d.out_len;
  }
  const uint64_t run_end = from + code.size();
  auto redirect = [&](uint64_t target, const Decoded& d) -> Result<uint64_t> {
    if (target <= from || target >= run_end) return target;
    for (size_t i = 0; i < run.size(); ++i)
      if (run[i].src == target) return to + out.insn_offsets[i];
    return make_error(Errc::not_instruction_boundary,
                      fmt::format("cannot relocate {}: it branches to {:#x}, inside an instruction "
                                  "of the relocated run",
                                  describe(d, code), target));
  };

  // Pass 2: emit.
  out.code.resize(pos);
  for (size_t i = 0; i < run.size(); ++i) {
    const Decoded& d = run[i];
    const uint64_t dst = to + out.insn_offsets[i];
    uint8_t* w = out.code.data() + out.insn_offsets[i];
    if (d.branch) {
      auto t = redirect(d.target, d);
      if (!t) return std::move(t).error();
      if (!rel32_reaches(dst + d.out_len, *t))
        return make_error(Errc::out_of_range,
                          fmt::format("cannot relocate {} to {:#x}: its target {:#x} is out of "
                                      "rel32 reach",
                                      describe(d, code), dst, *t));
      if (auto n = encode_branch(d, dst, *t, w); !n || *n != d.out_len)
        return make_error(Errc::unsupported,
                          fmt::format("cannot relocate {}: rel32 form not encodable",
                                      describe(d, code)));
    } else {
      std::memcpy(w, code.data() + d.src_off, d.in.length);
      if (d.riprel) {
        // Re-target the disp32 so the operand names the same absolute address.
        const uint64_t abs = d.src + d.in.length + static_cast<int64_t>(d.in.raw.disp.value);
        const int64_t nd = static_cast<int64_t>(abs - (dst + d.in.length));
        if (nd < std::numeric_limits<int32_t>::min() || nd > std::numeric_limits<int32_t>::max())
          return make_error(Errc::out_of_range,
                            fmt::format("cannot relocate {} to {:#x}: RIP-relative operand "
                                        "{:#x} is out of disp32 reach",
                                        describe(d, code), dst, abs));
        if (d.in.raw.disp.size != 32)
          return make_error(Errc::unsupported, fmt::format("cannot relocate {}: disp{} RIP operand",
                                                           describe(d, code), d.in.raw.disp.size));
        const int32_t nd32 = static_cast<int32_t>(nd);
        std::memcpy(w + d.in.raw.disp.offset, &nd32, sizeof nd32);
      }
    }
  }
  return out;
}

}  // namespace utramp::arch
