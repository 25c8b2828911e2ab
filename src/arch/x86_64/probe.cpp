// Probes on x86-64: planning how a displaced instruction runs, its emulation, the
// out-of-line slot, the jump window and its detour. The fixed code (return trampoline,
// redirect trap, extended-state save) is in probe_asm.cpp.
#include "arch/probe.hpp"

#include <Zydis/Zydis.h>
#include <asmjit/x86.h>
#include <fmt/format.h>
#include <ucontext.h>

#include <cstring>

#include "arch/x86_64/asm_util.hpp"
#include "arch/x86_64/zydis_util.hpp"
#include "common/hex.hpp"

namespace utramp::arch {

namespace {

namespace ax = asmjit::x86;
using asmjit::Imm;
using asmjit::Label;
using x86::assemble;

// PtRegs as an array of uint64_t, indexed like this.
enum RegIndex : int8_t {
  kR15, kR14, kR13, kR12, kRbp, kRbx, kR11, kR10, kR9, kR8, kRax, kRcx, kRdx, kRsi, kRdi,
  kRip, kEflags, kRsp
};

constexpr int8_t kNoReg = -1;
constexpr int8_t kRipBase = -2;

int8_t reg_index(ZydisRegister r) {
  switch (ZydisRegisterGetLargestEnclosing(ZYDIS_MACHINE_MODE_LONG_64, r)) {
    case ZYDIS_REGISTER_RAX: return kRax;
    case ZYDIS_REGISTER_RCX: return kRcx;
    case ZYDIS_REGISTER_RDX: return kRdx;
    case ZYDIS_REGISTER_RBX: return kRbx;
    case ZYDIS_REGISTER_RSP: return kRsp;
    case ZYDIS_REGISTER_RBP: return kRbp;
    case ZYDIS_REGISTER_RSI: return kRsi;
    case ZYDIS_REGISTER_RDI: return kRdi;
    case ZYDIS_REGISTER_R8: return kR8;
    case ZYDIS_REGISTER_R9: return kR9;
    case ZYDIS_REGISTER_R10: return kR10;
    case ZYDIS_REGISTER_R11: return kR11;
    case ZYDIS_REGISTER_R12: return kR12;
    case ZYDIS_REGISTER_R13: return kR13;
    case ZYDIS_REGISTER_R14: return kR14;
    case ZYDIS_REGISTER_R15: return kR15;
    default: return kNoReg;
  }
}

// The condition code of a jcc, as in its opcode (0x70 + cc).
int jcc_condition(ZydisMnemonic m) {
  switch (m) {
    case ZYDIS_MNEMONIC_JO: return 0x0;
    case ZYDIS_MNEMONIC_JNO: return 0x1;
    case ZYDIS_MNEMONIC_JB: return 0x2;
    case ZYDIS_MNEMONIC_JNB: return 0x3;
    case ZYDIS_MNEMONIC_JZ: return 0x4;
    case ZYDIS_MNEMONIC_JNZ: return 0x5;
    case ZYDIS_MNEMONIC_JBE: return 0x6;
    case ZYDIS_MNEMONIC_JNBE: return 0x7;
    case ZYDIS_MNEMONIC_JS: return 0x8;
    case ZYDIS_MNEMONIC_JNS: return 0x9;
    case ZYDIS_MNEMONIC_JP: return 0xa;
    case ZYDIS_MNEMONIC_JNP: return 0xb;
    case ZYDIS_MNEMONIC_JL: return 0xc;
    case ZYDIS_MNEMONIC_JNL: return 0xd;
    case ZYDIS_MNEMONIC_JLE: return 0xe;
    case ZYDIS_MNEMONIC_JNLE: return 0xf;
    default: return -1;
  }
}

struct Decoded {
  ZydisDecodedInstruction in;
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
};

Result<Decoded> decode_full(std::span<const uint8_t> code, uint64_t addr) {
  Decoded d;
  const size_t n = std::min(code.size(), kMaxInsnLen);
  if (n == 0 || ZYAN_FAILED(ZydisDecoderDecodeFull(&x86::decoder(), code.data(), n, &d.in, d.ops)))
    return make_error(Errc::bad_format, fmt::format("cannot decode an instruction at {:#x} (bytes {})",
                                                    addr, hex_bytes(code.first(n))));
  return d;
}

std::string describe(const Decoded& d, std::span<const uint8_t> code, uint64_t addr) {
  return fmt::format("'{}' (bytes {})", x86::format(d.in, d.ops, addr),
                     hex_bytes(code.first(d.in.length)));
}

// The operand of an indirect jmp/call, for evaluation in signal context.
Result<void> indirect_operand(const Decoded& d, uint64_t addr, Emulation* e,
                              std::span<const uint8_t> code) {
  const ZydisDecodedOperand& op = d.ops[0];
  if (d.in.operand_width != 64)
    return make_error(Errc::unsupported, fmt::format("cannot emulate {} at {:#x}: {}-bit target operand",
                                                     describe(d, code, addr), addr, d.in.operand_width));
  if (op.type == ZYDIS_OPERAND_TYPE_REGISTER) {
    e->reg = reg_index(op.reg.value);
    if (e->reg == kNoReg)
      return make_error(Errc::unsupported,
                        fmt::format("cannot emulate {} at {:#x}: unexpected register", describe(d, code, addr), addr));
    return {};
  }
  if (op.type != ZYDIS_OPERAND_TYPE_MEMORY)
    return make_error(Errc::unsupported,
                      fmt::format("cannot emulate {} at {:#x}: unexpected operand", describe(d, code, addr), addr));
  e->mem = true;
  e->addr32 = d.in.address_width == 32;
  if (op.mem.segment == ZYDIS_REGISTER_FS) e->seg_fs = true;
  else if (op.mem.segment == ZYDIS_REGISTER_GS)
    return make_error(Errc::unsupported,
                      fmt::format("cannot emulate {} at {:#x}: gs-relative operand", describe(d, code, addr), addr));
  if (op.mem.base == ZYDIS_REGISTER_RIP || op.mem.base == ZYDIS_REGISTER_EIP) {
    e->base = kRipBase;
  } else if (op.mem.base != ZYDIS_REGISTER_NONE) {
    e->base = reg_index(op.mem.base);
    if (e->base == kNoReg)
      return make_error(Errc::unsupported,
                        fmt::format("cannot emulate {} at {:#x}: unexpected base register", describe(d, code, addr), addr));
  }
  if (op.mem.index != ZYDIS_REGISTER_NONE) {
    e->index = reg_index(op.mem.index);
    if (e->index == kNoReg)
      return make_error(Errc::unsupported,
                        fmt::format("cannot emulate {} at {:#x}: unexpected index register", describe(d, code, addr), addr));
    e->scale = op.mem.scale;
  }
  e->disp = op.mem.disp.has_displacement ? op.mem.disp.value : 0;
  return {};
}

bool condition_holds(uint8_t cc, uint64_t fl) noexcept {
  const bool cf = fl & 0x1, pf = fl & 0x4, zf = fl & 0x40, sf = fl & 0x80, of = fl & 0x800;
  bool r = false;
  switch (cc >> 1) {
    case 0: r = of; break;
    case 1: r = cf; break;
    case 2: r = zf; break;
    case 3: r = cf || zf; break;
    case 4: r = sf; break;
    case 5: r = pf; break;
    case 6: r = sf != of; break;
    case 7: r = zf || sf != of; break;
  }
  return (cc & 1) ? !r : r;
}

// Emits `jmp target` from code at an unknown-yet-fixed base: rel32 where it reaches
// from anywhere in a block of up to 1 MiB at `base`, else `jmp [rip+lit]` with the
// address in a literal that follows (no register is free where we jump from).
void jmp_abs(ax::Assembler& a, uint64_t target, uint64_t base) {
  if (x86::rel32_reaches_block(base, x86::kBlockReach, target)) {
    a.long_().jmp(Imm(target));
  } else {
    Label lit = a.newLabel(), after = a.newLabel();
    a.jmp(ax::qword_ptr(lit));
    a.bind(lit);
    a.embedUInt64(target);
    a.bind(after);
  }
}

}  // namespace

// ---- registers --------------------------------------------------------------------------

void regs_from_context(const ucontext_t* uc, PtRegs* r) noexcept {
  const greg_t* g = uc->uc_mcontext.gregs;
  r->r15 = g[REG_R15];
  r->r14 = g[REG_R14];
  r->r13 = g[REG_R13];
  r->r12 = g[REG_R12];
  r->rbp = g[REG_RBP];
  r->rbx = g[REG_RBX];
  r->r11 = g[REG_R11];
  r->r10 = g[REG_R10];
  r->r9 = g[REG_R9];
  r->r8 = g[REG_R8];
  r->rax = g[REG_RAX];
  r->rcx = g[REG_RCX];
  r->rdx = g[REG_RDX];
  r->rsi = g[REG_RSI];
  r->rdi = g[REG_RDI];
  r->rip = g[REG_RIP];
  r->eflags = g[REG_EFL];
  r->rsp = g[REG_RSP];
}

const PtRegs* redirect_regs(const ucontext_t* uc) noexcept {
  return reinterpret_cast<const PtRegs*>(uc->uc_mcontext.gregs[REG_RBX]);
}

void regs_to_context(const PtRegs& r, ucontext_t* uc, bool with_ip) noexcept {
  greg_t* g = uc->uc_mcontext.gregs;
  g[REG_R15] = r.r15;
  g[REG_R14] = r.r14;
  g[REG_R13] = r.r13;
  g[REG_R12] = r.r12;
  g[REG_RBP] = r.rbp;
  g[REG_RBX] = r.rbx;
  g[REG_R11] = r.r11;
  g[REG_R10] = r.r10;
  g[REG_R9] = r.r9;
  g[REG_R8] = r.r8;
  g[REG_RAX] = r.rax;
  g[REG_RCX] = r.rcx;
  g[REG_RDX] = r.rdx;
  g[REG_RSI] = r.rsi;
  g[REG_RDI] = r.rdi;
  g[REG_RSP] = r.rsp;
  g[REG_EFL] = (g[REG_EFL] & ~kUserFlags) | (r.eflags & kUserFlags);
  if (with_ip) g[REG_RIP] = r.rip;
}

// ---- the displaced instruction ----------------------------------------------------------

Result<OutOfLine> plan_out_of_line(std::span<const uint8_t> code, uint64_t addr) {
  auto insn = decode(code.data(), code.size(), addr);
  if (!insn) return std::move(insn).error();
  auto dr = decode_full(code, addr);
  if (!dr) return std::move(dr).error();
  const Decoded& d = *dr;
  OutOfLine out;
  out.insn = *insn;
  Emulation& e = out.emu;
  e.next = addr + d.in.length;
  auto refuse = [&](std::string_view why) {
    return make_error(Errc::unsupported,
                      fmt::format("cannot run {} at {:#x} out of line: {}", describe(d, code, addr),
                                  addr, why));
  };
  if (d.in.meta.branch_type == ZYDIS_BRANCH_TYPE_FAR) return refuse("far control transfer");
  if (d.in.mnemonic == ZYDIS_MNEMONIC_XBEGIN)
    return refuse("transaction start (its abort path is relative to where it runs)");
  switch (insn->flow) {
    case Flow::none:
    case Flow::syscall:
      // Runs from the slot: a system call returns to the slot's jmp back.
      out.kind = OutOfLine::Kind::slot;
      if (insn->relative_branch) return refuse("relative operand of an unsupported kind");
      return out;
    case Flow::trap:
      return refuse("it raises a trap itself");
    case Flow::jump:
      e.kind = Emulation::Kind::jmp;
      e.target = insn->target;
      break;
    case Flow::cond_jump:
      e.target = insn->target;
      e.addr32 = d.in.address_width == 32;
      switch (d.in.mnemonic) {
        case ZYDIS_MNEMONIC_LOOP: e.kind = Emulation::Kind::loop; break;
        case ZYDIS_MNEMONIC_LOOPE: e.kind = Emulation::Kind::loope; break;
        case ZYDIS_MNEMONIC_LOOPNE: e.kind = Emulation::Kind::loopne; break;
        case ZYDIS_MNEMONIC_JRCXZ:
        case ZYDIS_MNEMONIC_JECXZ: e.kind = Emulation::Kind::jrcxz; break;
        default: {
          const int cc = jcc_condition(d.in.mnemonic);
          if (cc < 0) return refuse("unknown conditional branch");
          e.kind = Emulation::Kind::jcc;
          e.cond = static_cast<uint8_t>(cc);
          e.addr32 = false;
        }
      }
      break;
    case Flow::call:
      e.kind = Emulation::Kind::call;
      e.target = insn->target;
      break;
    case Flow::ret:
      if (d.in.mnemonic != ZYDIS_MNEMONIC_RET) return refuse("not a near return");
      e.kind = Emulation::Kind::ret;
      for (unsigned i = 0; i < d.in.operand_count_visible; ++i)
        if (d.ops[i].type == ZYDIS_OPERAND_TYPE_IMMEDIATE) e.ret_pop = static_cast<uint16_t>(d.ops[i].imm.value.u);
      break;
    case Flow::indirect_jump:
    case Flow::indirect_call: {
      e.kind = insn->flow == Flow::indirect_jump ? Emulation::Kind::ind_jmp : Emulation::Kind::ind_call;
      if (auto r = indirect_operand(d, addr, &e, code); !r) return std::move(r).error();
      break;
    }
  }
  out.kind = OutOfLine::Kind::emulate;
  return out;
}

// Reads and writes the interrupted thread's stack and the memory an indirect operand
// names, as the instruction would; not instrumented (ASan cannot know these frames).
__attribute__((no_sanitize("address"))) void emulate(const Emulation& e, PtRegs* r) noexcept {
  uint64_t* g = reinterpret_cast<uint64_t*>(r);
  auto push = [&](uint64_t v) {
    g[kRsp] -= 8;
    *reinterpret_cast<volatile uint64_t*>(g[kRsp]) = v;
  };
  auto operand = [&]() -> uint64_t {
    if (!e.mem) return g[e.reg];
    uint64_t ea = static_cast<uint64_t>(e.disp);
    if (e.base == kRipBase) ea += e.next;
    else if (e.base >= 0) ea += g[e.base];
    if (e.index >= 0) ea += g[e.index] * e.scale;
    if (e.addr32) ea &= 0xffffffffu;
    if (e.seg_fs) {
      uint64_t fs_base;
      asm volatile("mov %%fs:0, %0" : "=r"(fs_base));  // the TCB's self-pointer (x86-64 TLS ABI)
      ea += fs_base;
    }
    return *reinterpret_cast<volatile const uint64_t*>(ea);
  };
  auto count = [&]() -> uint64_t { return e.addr32 ? (g[kRcx] & 0xffffffffu) : g[kRcx]; };
  auto set_count = [&](uint64_t v) { g[kRcx] = e.addr32 ? (v & 0xffffffffu) : v; };
  switch (e.kind) {
    case Emulation::Kind::jmp:
      g[kRip] = e.target;
      return;
    case Emulation::Kind::jcc:
      g[kRip] = condition_holds(e.cond, g[kEflags]) ? e.target : e.next;
      return;
    case Emulation::Kind::loop:
    case Emulation::Kind::loope:
    case Emulation::Kind::loopne: {
      const uint64_t c = count() - 1;
      set_count(c);
      const bool zf = g[kEflags] & 0x40;
      bool take = (e.addr32 ? (c & 0xffffffffu) : c) != 0;
      if (e.kind == Emulation::Kind::loope) take = take && zf;
      if (e.kind == Emulation::Kind::loopne) take = take && !zf;
      g[kRip] = take ? e.target : e.next;
      return;
    }
    case Emulation::Kind::jrcxz:
      g[kRip] = count() == 0 ? e.target : e.next;
      return;
    case Emulation::Kind::call:
      push(e.next);
      g[kRip] = e.target;
      return;
    case Emulation::Kind::ret: {
      const uint64_t to = *reinterpret_cast<volatile const uint64_t*>(g[kRsp]);
      g[kRsp] += 8 + e.ret_pop;
      g[kRip] = to;
      return;
    }
    case Emulation::Kind::ind_jmp:
      g[kRip] = operand();
      return;
    case Emulation::Kind::ind_call: {
      const uint64_t to = operand();  // evaluated with rsp before the push
      push(e.next);
      g[kRip] = to;
      return;
    }
  }
}

// Slot layout, at `base`:
//
//   +0:           <insn relocated>          ; pre-handlers only: one trap per hit
//                 jmp addr+len
//   +post_entry:  <insn relocated>          ; with post-handlers
//   +post_trap:   int3                      ; the second trap runs them
//                 jmp addr+len
Result<SlotCode> emit_slot(std::span<const uint8_t> insn, uint64_t addr, uint64_t base) {
  SlotCode out;
  const uint64_t back = addr + insn.size();
  auto r1 = relocate(insn, addr, base);
  if (!r1) return std::move(r1).error();
  out.code = std::move(r1->code);
  auto j1 = encode_jmp(base + out.code.size(), back);
  if (!j1) return std::move(j1).error();
  out.code.insert(out.code.end(), j1->begin(), j1->end());
  out.post_entry = static_cast<uint32_t>(out.code.size());
  auto r2 = relocate(insn, addr, base + out.post_entry);
  if (!r2) return std::move(r2).error();
  out.code.insert(out.code.end(), r2->code.begin(), r2->code.end());
  out.post_trap = static_cast<uint32_t>(out.code.size());
  out.code.push_back(kTrapByte);
  auto j2 = encode_jmp(base + out.code.size(), back);
  if (!j2) return std::move(j2).error();
  out.code.insert(out.code.end(), j2->begin(), j2->end());
  if (out.code.size() > kSlotSizeBound)
    return make_error(Errc::too_big, fmt::format("slot of {} bytes over its bound", out.code.size()));
  return out;
}

// ---- jump optimisation -------------------------------------------------------------------

Result<JumpWindow> plan_jump_window(std::span<const uint8_t> code, uint64_t addr) {
  JumpWindow w;
  std::vector<Insn> insns;
  while (w.len < kSiteLen) {
    if (w.len >= code.size())
      return make_error(Errc::too_small,
                        fmt::format("the function ends {} bytes after {:#x}: no room for a 5-byte "
                                    "jump",
                                    code.size(), addr));
    auto insn = decode(code.data() + w.len, code.size() - w.len, addr + w.len);
    if (!insn) return std::move(insn).error();
    if (w.len + insn->length > code.size())
      return make_error(Errc::too_small, fmt::format("instruction at {:#x} runs past the function",
                                                     addr + w.len));
    const std::string where = fmt::format("'{}' at +{}", insn->text(), w.len);
    switch (insn->flow) {
      case Flow::trap:
      case Flow::syscall:
        return make_error(Errc::unsupported, fmt::format("{} cannot run from a detour", where));
      case Flow::indirect_call:
        return make_error(Errc::unsupported,
                          fmt::format("{}: an indirect call would return into the detour", where));
      case Flow::call:
        if (w.len + insn->length < kSiteLen)
          return make_error(Errc::unsupported,
                            fmt::format("{}: a call inside the 5 bytes would return into them", where));
        w.ends_in_call = true;
        w.call_target = insn->target;
        break;
      default:
        break;
    }
    w.offsets.push_back(w.len);
    w.len += insn->length;
    if (insn->relative_branch || insn->rip_relative) w.targets.push_back(insn->target);
    insns.push_back(*insn);
  }
  w.bytes.assign(code.begin(), code.begin() + w.len);
  // Relative branches inside the window must not target the call we replace by a push
  // and a jump (relocate() redirects branches only among the instructions it moves).
  const uint32_t moved = w.ends_in_call ? w.offsets.back() : w.len;
  for (const Insn& i : insns)
    if (i.relative_branch && w.ends_in_call && i.target == addr + moved)
      return make_error(Errc::unsupported,
                        fmt::format("'{}' branches to the call at the end of the 5 bytes", i.text()));
  if (moved) {
    auto r = relocate(std::span(w.bytes).first(moved), addr, addr + 0x100000);
    if (!r) return std::move(r).error();
  }
  return w;
}

size_t detour_size_bound(const DetourSpec& spec) { return 256 + 4 * spec.window.len; }

// Detour layout (example for a window of one 6-byte instruction at A):
//
//   lea  rsp, [rsp-128]          ; the interrupted code may keep data below rsp
//   push rax ; pushfq ; push rax ; PtRegs.rsp, .eflags, .rip (placeholders)
//   push rdi ... push r15        ; PtRegs.rdi ... .r15: rsp = &regs
//   lea  rax, [rsp+144+128]      ; the interrupted rsp
//   mov  [rsp+136], rax
//   mov  rax, A ; mov [rsp+120], rax
//   mov  rbx, rsp                ; rbx: &regs across the call (callee-saved)
//   and  rsp, -16
//   mov  rdi, site ; mov rsi, rbx
//   call dispatch
//   test eax, eax ; jnz redirect
//   mov  rsp, rbx
//   pop  r15 ... pop rdi         ; what the handlers left in regs
//   lea  rsp, [rsp+8]            ; rip
//   popfq
//   pop  rsp                     ; regs.rsp
//   <window relocated>           ; a last call becomes: push A+len; jmp target
//   jmp  A+len
// redirect:
//   jmp  [rip+lit]               ; the redirect trap: rbx = &regs
//
// Frame below the interrupted rsp R:
//   R-1 .. R-128    red zone, untouched
//   R-136           regs.rsp        R-144  regs.eflags     R-152  regs.rip
//   R-160 .. R-272  regs.rdi .. regs.r15
//   below           alignment, then dispatch's frame
Result<std::vector<uint8_t>> emit_detour(const DetourSpec& spec, uint64_t base) {
  const JumpWindow& w = spec.window;
  const uint32_t moved = w.ends_in_call ? w.offsets.back() : w.len;
  size_t moved_len = 0;
  if (moved) {
    auto trial = relocate(std::span(w.bytes).first(moved), spec.addr, base);
    if (!trial) return std::move(trial).error();
    moved_len = trial->code.size();
  }
  uint32_t window_off = 0;
  auto code = assemble(
      base, fmt::format("the detour of the probe at {:#x}", spec.addr),
      [&](ax::Assembler& a) {
        Label redirect = a.newLabel(), window = a.newLabel();
        a.lea(ax::rsp, ax::ptr(ax::rsp, -128));
        a.push(ax::rax);
        a.pushfq();
        a.push(ax::rax);
        for (const ax::Gp& r : {ax::rdi, ax::rsi, ax::rdx, ax::rcx, ax::rax, ax::r8, ax::r9, ax::r10,
                                ax::r11, ax::rbx, ax::rbp, ax::r12, ax::r13, ax::r14, ax::r15})
          a.push(r);
        a.lea(ax::rax, ax::ptr(ax::rsp, 144 + 128));
        a.mov(ax::qword_ptr(ax::rsp, 136), ax::rax);
        a.mov(ax::rax, Imm(spec.addr));
        a.mov(ax::qword_ptr(ax::rsp, 120), ax::rax);
        a.mov(ax::rbx, ax::rsp);
        a.and_(ax::rsp, Imm(-16));
        a.mov(ax::rdi, Imm(spec.site));
        a.mov(ax::rsi, ax::rbx);
        if (x86::rel32_reaches_block(base, x86::kBlockReach, spec.dispatch)) {
          a.call(Imm(spec.dispatch));
        } else {
          a.mov(ax::rax, Imm(spec.dispatch));
          a.call(ax::rax);
        }
        a.test(ax::eax, ax::eax);
        a.long_().jnz(redirect);
        a.mov(ax::rsp, ax::rbx);
        for (const ax::Gp& r : {ax::r15, ax::r14, ax::r13, ax::r12, ax::rbp, ax::rbx, ax::r11,
                                ax::r10, ax::r9, ax::r8, ax::rax, ax::rcx, ax::rdx, ax::rsi, ax::rdi})
          a.pop(r);
        a.lea(ax::rsp, ax::ptr(ax::rsp, 8));
        a.popfq();
        a.pop(ax::rsp);
        a.bind(window);
        if (moved_len) {
          std::vector<uint8_t> placeholder(moved_len, kTrapByte);
          a.embed(placeholder.data(), placeholder.size());
        }
        if (w.ends_in_call) {
          // The call pushes the original return address (A+len, after the window), so
          // the callee returns to the original code and unwinders see the real caller.
          const uint64_t ret = spec.addr + w.len;
          a.lea(ax::rsp, ax::ptr(ax::rsp, -8));
          a.mov(ax::dword_ptr(ax::rsp), Imm(static_cast<int32_t>(ret & 0xffffffffu)));
          a.mov(ax::dword_ptr(ax::rsp, 4), Imm(static_cast<int32_t>(ret >> 32)));
          jmp_abs(a, w.call_target, base);
        } else {
          jmp_abs(a, spec.addr + w.len, base);
        }
        a.bind(redirect);
        Label lit = a.newLabel();
        a.jmp(ax::qword_ptr(lit));  // no register is free: every one holds the program's
        a.bind(lit);
        a.embedUInt64(spec.redirect_trap);
        window_off = window.id();
      },
      [&](asmjit::CodeHolder& c) { window_off = static_cast<uint32_t>(c.labelOffset(window_off)); });
  if (!code) return std::move(code).error();
  if (moved_len) {
    auto rel = relocate(std::span(w.bytes).first(moved), spec.addr, base + window_off);
    if (!rel) return std::move(rel).error();
    if (rel->code.size() != moved_len)
      return make_error(Errc::unsupported, "relocated window changed length between passes");
    std::copy(rel->code.begin(), rel->code.end(), code->begin() + window_off);
  }
  if (code->size() > detour_size_bound(spec))
    return make_error(Errc::too_big, fmt::format("detour of {} bytes over its bound", code->size()));
  return std::move(*code);
}

// ---- handler analysis --------------------------------------------------------------------

bool insn_touches_extended_state(std::span<const uint8_t> code, uint64_t addr) {
  auto dr = decode_full(code, addr);
  if (!dr) return true;
  const Decoded& d = *dr;
  switch (d.in.meta.category) {
    // Instructions that change x87/SSE/AVX state without naming a vector register
    // (vzeroupper, emms, fninit, ldmxcsr, xrstor, ...), and every vector family.
    case ZYDIS_CATEGORY_AMD3DNOW:
    case ZYDIS_CATEGORY_AMX_TILE:
    case ZYDIS_CATEGORY_AVX:
    case ZYDIS_CATEGORY_AVX2:
    case ZYDIS_CATEGORY_AVX2GATHER:
    case ZYDIS_CATEGORY_AVX512:
    case ZYDIS_CATEGORY_AVX512_4FMAPS:
    case ZYDIS_CATEGORY_AVX512_4VNNIW:
    case ZYDIS_CATEGORY_AVX512_BITALG:
    case ZYDIS_CATEGORY_AVX512_VBMI:
    case ZYDIS_CATEGORY_AVX512_VP2INTERSECT:
    case ZYDIS_CATEGORY_FCMOV:
    case ZYDIS_CATEGORY_FMA4:
    case ZYDIS_CATEGORY_FP16:
    case ZYDIS_CATEGORY_KMASK:
    case ZYDIS_CATEGORY_MMX:
    case ZYDIS_CATEGORY_SSE:
    case ZYDIS_CATEGORY_VFMA:
    case ZYDIS_CATEGORY_X87_ALU:
    case ZYDIS_CATEGORY_XOP:
    case ZYDIS_CATEGORY_XSAVE:
    case ZYDIS_CATEGORY_XSAVEOPT:
      return true;
    default:
      break;
  }
  for (unsigned i = 0; i < d.in.operand_count; ++i) {
    const ZydisDecodedOperand& op = d.ops[i];
    ZydisRegister regs[3] = {ZYDIS_REGISTER_NONE, ZYDIS_REGISTER_NONE, ZYDIS_REGISTER_NONE};
    if (op.type == ZYDIS_OPERAND_TYPE_REGISTER) regs[0] = op.reg.value;
    if (op.type == ZYDIS_OPERAND_TYPE_MEMORY) {
      regs[1] = op.mem.base;
      regs[2] = op.mem.index;  // VSIB: a vector index
    }
    for (ZydisRegister r : regs) {
      if (r == ZYDIS_REGISTER_NONE) continue;
      if (r == ZYDIS_REGISTER_MXCSR || r == ZYDIS_REGISTER_X87CONTROL ||
          r == ZYDIS_REGISTER_X87STATUS || r == ZYDIS_REGISTER_X87TAG)
        return true;
      switch (ZydisRegisterGetClass(r)) {
        case ZYDIS_REGCLASS_X87:
        case ZYDIS_REGCLASS_MMX:
        case ZYDIS_REGCLASS_XMM:
        case ZYDIS_REGCLASS_YMM:
        case ZYDIS_REGCLASS_ZMM:
        case ZYDIS_REGCLASS_TMM:
        case ZYDIS_REGCLASS_MASK:
          return true;
        default:
          break;
      }
    }
  }
  return false;
}

}  // namespace utramp::arch
