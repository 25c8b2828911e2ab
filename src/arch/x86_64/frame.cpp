// The code a -pg function runs before its profiling call (`call mcount` after the frame
// is set up), proven undoable: arch::frame_undo().
#include <Zydis/Zydis.h>
#include <fmt/format.h>

#include <algorithm>

#include "arch/arch.hpp"
#include "arch/x86_64/zydis_util.hpp"
#include "common/hex.hpp"

namespace utramp::arch {

namespace {

// Register number as x86 encodes it (rax 0 .. r15 15), -1 for anything but a GPR.
int gpr_number(ZydisRegister r) {
  const ZydisRegister full = ZydisRegisterGetLargestEnclosing(ZYDIS_MACHINE_MODE_LONG_64, r);
  if (full < ZYDIS_REGISTER_RAX || full > ZYDIS_REGISTER_R15) return -1;
  return int(full - ZYDIS_REGISTER_RAX);  // Zydis lists them in encoding order
}

constexpr int kRsp = 4, kRbp = 5;

}  // namespace

Result<FrameUndo> frame_undo(std::span<const uint8_t> code, uint64_t at) {
  FrameUndo out;
  std::vector<int> pushed, changed;  // registers saved by a push; registers written since
  int64_t sp = 0;                    // rsp - rbp, while known
  bool sp_known = false;
  const size_t start = landing_pad_length(code);
  for (size_t off = start; off < code.size();) {
    ZydisDecodedInstruction in;
    ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
    if (ZYAN_FAILED(ZydisDecoderDecodeFull(&x86::decoder(), code.data() + off,
                                           std::min<size_t>(code.size() - off, kMaxInsnLen), &in,
                                           ops)))
      return make_error(Errc::bad_format, fmt::format("+{:#x}: cannot decode {}", off,
                                                      hex_bytes(code.subspan(off, 1))));
    const uint64_t ip = at + off;
    auto refuse = [&](std::string_view why) {
      return make_error(Errc::unsupported,
                        fmt::format("+{:#x}: '{}' ({}) {}", off, x86::format(in, ops, ip),
                                    hex_bytes(code.subspan(off, in.length)), why));
    };
    if (off == start) {
      if (in.mnemonic != ZYDIS_MNEMONIC_PUSH || ops[0].type != ZYDIS_OPERAND_TYPE_REGISTER ||
          ops[0].reg.value != ZYDIS_REGISTER_RBP)
        return refuse("comes first, not push rbp: not a frame set-up");
    } else if (out.frame_at == 0) {
      // The second instruction must make rbp the frame pointer.
      if (in.mnemonic != ZYDIS_MNEMONIC_MOV || ops[0].type != ZYDIS_OPERAND_TYPE_REGISTER ||
          ops[0].reg.value != ZYDIS_REGISTER_RBP || ops[1].type != ZYDIS_OPERAND_TYPE_REGISTER ||
          ops[1].reg.value != ZYDIS_REGISTER_RSP)
        return refuse("follows push rbp, not mov rbp, rsp: not a frame set-up");
      out.frame_at = off + in.length;
      sp_known = true;
    } else if (in.meta.category == ZYDIS_CATEGORY_CALL || in.meta.category == ZYDIS_CATEGORY_RET ||
               in.meta.category == ZYDIS_CATEGORY_UNCOND_BR ||
               in.meta.category == ZYDIS_CATEGORY_COND_BR) {
      return refuse("branches before the profiling call");
    } else if (in.mnemonic == ZYDIS_MNEMONIC_PUSH) {
      const int r = ops[0].type == ZYDIS_OPERAND_TYPE_REGISTER ? gpr_number(ops[0].reg.value) : -1;
      if (r < 0 || r == kRsp || r == kRbp) return refuse("pushes what cannot be restored");
      if (!sp_known) return refuse("pushes after the stack pointer was realigned");
      if (std::count(changed.begin(), changed.end(), r))
        return refuse("pushes a register already changed: its caller's value is lost");
      sp -= 8;
      pushed.push_back(r);
      out.pushes.push_back({uint8_t(r), int32_t(sp)});
    } else if (in.mnemonic == ZYDIS_MNEMONIC_SUB && ops[0].type == ZYDIS_OPERAND_TYPE_REGISTER &&
               ops[0].reg.value == ZYDIS_REGISTER_RSP && ops[1].type == ZYDIS_OPERAND_TYPE_IMMEDIATE) {
      sp -= int64_t(ops[1].imm.value.s);
    } else if (in.mnemonic == ZYDIS_MNEMONIC_AND && ops[0].type == ZYDIS_OPERAND_TYPE_REGISTER &&
               ops[0].reg.value == ZYDIS_REGISTER_RSP && ops[1].type == ZYDIS_OPERAND_TYPE_IMMEDIATE) {
      sp_known = false;  // realigned: `leave` still undoes it
    } else {
      // Anything else may write only the frame's memory (below rbp, dead once the frame
      // is undone) and registers saved by an earlier push (put back from their slots).
      for (unsigned i = 0; i < in.operand_count; ++i) {
        const ZydisDecodedOperand& op = ops[i];
        if (!(op.actions & ZYDIS_OPERAND_ACTION_MASK_WRITE)) continue;
        if (op.type == ZYDIS_OPERAND_TYPE_MEMORY) {
          if (op.mem.base != ZYDIS_REGISTER_RBP && op.mem.base != ZYDIS_REGISTER_RSP)
            return refuse("writes memory outside the frame");
          continue;
        }
        if (op.type != ZYDIS_OPERAND_TYPE_REGISTER) return refuse("writes what cannot be undone");
        if (op.reg.value == ZYDIS_REGISTER_RFLAGS || op.reg.value == ZYDIS_REGISTER_EFLAGS ||
            op.reg.value == ZYDIS_REGISTER_FLAGS)
          continue;  // the ABI keeps no flag across a call (DF is clear and stays so)
        const int r = gpr_number(op.reg.value);
        if (r < 0 || r == kRsp || r == kRbp || !std::count(pushed.begin(), pushed.end(), r))
          return refuse("changes a register the function's caller may rely on");
        changed.push_back(r);
      }
    }
    off += in.length;
  }
  if (out.frame_at == 0) return make_error(Errc::unsupported, "no frame set-up before the call");
  return out;
}

}  // namespace utramp::arch
