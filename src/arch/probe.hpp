// The machine side of probes (DESIGN §7): how an instruction displaced by an int3 is
// executed, the out-of-line slot, the jump-optimised detour, the return trampoline,
// and the register view handlers receive. Feature code (src/probe/) includes only this
// header; everything x86 lives in src/arch/x86_64/probe*.cpp.
//
// Three ways a probe at address A reaches its handlers:
//
//   int3 at A ─ SIGTRAP ─ handlers run in the signal handler, then the displaced
//               instruction either
//                 runs from its slot:   slot:      insn'; jmp A+len
//                 (with post-handlers)  post:      insn'; int3; jmp A+len
//               or, for control flow (jmp, jcc, loop, call, ret, indirect jmp/call),
//               is emulated on the trapped registers: no slot, no second trap.
//
//   jmp detour at A (jump-optimised; the 5 bytes cover whole instructions):
//               detour: skip the red zone, save every GPR and the flags as PtRegs,
//                       call dispatch(site, regs), restore, run the relocated
//                       instructions, jmp A+window.
//
//   return probe: the return address on the stack at the function's entry is replaced
//               by utramp's return trampoline, which saves the return registers, calls
//               the return callback, and returns to the original caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "arch/arch.hpp"
#include "common/result.hpp"

struct ucontext_t;

namespace utramp::arch {

// What a handler sees, in the layout of the kernel's pt_regs prefix (and of the C API's
// struct utramp_regs, which must stay identical).
struct PtRegs {
  uint64_t r15, r14, r13, r12, rbp, rbx, r11, r10, r9, r8, rax, rcx, rdx, rsi, rdi, rip, eflags,
      rsp;
};
static_assert(sizeof(PtRegs) == 18 * 8);

using ProbeHandler = int (*)(PtRegs* regs, uint64_t cookie);

// The flags a handler may change: CF PF AF ZF SF DF OF. The others (TF, IF, AC, ...)
// keep the interrupted values.
inline constexpr uint64_t kUserFlags = 0x1 | 0x4 | 0x10 | 0x40 | 0x80 | 0x400 | 0x800;

// Trap context <-> PtRegs. Async-signal-safe.
void regs_from_context(const ucontext_t* uc, PtRegs* r) noexcept;
// GPRs, rsp and the user flags; rip too when `with_ip`.
void regs_to_context(const PtRegs& r, ucontext_t* uc, bool with_ip) noexcept;

// ---- the displaced instruction -------------------------------------------------------

// A control-flow instruction executed by computing its effect on the registers. Plain
// data, evaluated in signal context.
struct Emulation {
  enum class Kind : uint8_t { jmp, jcc, loop, loope, loopne, jrcxz, call, ret, ind_jmp, ind_call };
  Kind kind = Kind::jmp;
  uint8_t cond = 0;        // jcc: the condition code (the low nibble of 0x7x)
  bool addr32 = false;     // loop/jrcxz with 0x67 (ecx), or a 32-bit effective address
  uint16_t ret_pop = 0;    // ret imm16
  uint64_t target = 0;     // relative branches
  uint64_t next = 0;       // address of the next instruction (A + len)
  // ind_jmp/ind_call: the operand. `reg`/`base`/`index` index PtRegs as uint64_t[]
  // (-1: none; -2: rip for base).
  bool mem = false;
  int8_t reg = -1, base = -1, index = -1;
  uint8_t scale = 0;
  bool seg_fs = false;
  int64_t disp = 0;
};

struct OutOfLine {
  enum class Kind : uint8_t { slot, emulate };
  Kind kind = Kind::slot;
  Insn insn;
  Emulation emu;
};

// How the instruction at `addr` (its bytes in `code`) runs when an int3 displaces it,
// or why it cannot (Errc::unsupported with the instruction in the message).
Result<OutOfLine> plan_out_of_line(std::span<const uint8_t> code, uint64_t addr);

// Applies `e` to `r`: rip, and rsp/rcx and the stack where the instruction changes
// them. Async-signal-safe; reads the memory an indirect operand names.
void emulate(const Emulation& e, PtRegs* r) noexcept;

// The slot of one displaced instruction, placed at `base` (within rel32 of `addr`):
//   +0           insn relocated; jmp addr+len
//   +post_entry  insn relocated; int3 (at +post_trap); jmp addr+len
struct SlotCode {
  std::vector<uint8_t> code;
  uint32_t post_entry = 0;
  uint32_t post_trap = 0;
};
Result<SlotCode> emit_slot(std::span<const uint8_t> insn, uint64_t addr, uint64_t base);
inline constexpr size_t kSlotSizeBound = 2 * (kMaxInsnLen + 6 + kSiteLen) + 1;

// ---- jump optimisation ---------------------------------------------------------------

// The whole instructions a 5-byte jmp at `addr` would replace, if they can run from a
// detour: relocatable, a call only as the last one, no trap or system call.
struct JumpWindow {
  uint32_t len = 0;                // bytes replaced (>= 5)
  std::vector<uint32_t> offsets;   // each instruction's offset from addr
  std::vector<uint8_t> bytes;
  bool ends_in_call = false;
  uint64_t call_target = 0;
  std::vector<uint64_t> targets;   // branch targets and RIP-relative operands it names
};
Result<JumpWindow> plan_jump_window(std::span<const uint8_t> code, uint64_t addr);

struct DetourSpec {
  uint64_t addr = 0;            // A
  JumpWindow window;
  uint64_t site = 0;            // first argument of dispatch
  uint64_t dispatch = 0;        // int dispatch(uint64_t site, PtRegs* regs): 0 continues
  uint64_t redirect_trap = 0;   // where a non-zero dispatch goes, rbx = &regs
};
Result<std::vector<uint8_t>> emit_detour(const DetourSpec& spec, uint64_t base);
size_t detour_size_bound(const DetourSpec& spec);

// ---- handler calls outside signal context --------------------------------------------

// Whether the instruction at `addr` may read or change x87, MMX, SSE, AVX, AVX-512 or
// AMX state (a vector or mask register, MXCSR, the x87 stack, vzeroupper, xrstor, ...);
// true for what cannot be decoded. A handler whose reachable code has none of these may
// be called from a detour or the return trampoline without saving that state (the
// probe layer walks the code; see probe/analysis.cpp); any other handler gets the whole
// extended state saved around it.
bool insn_touches_extended_state(std::span<const uint8_t> code, uint64_t addr);

// The extended (x87/SSE/AVX/AVX-512) state of this thread, for handlers that may touch
// it. `buf` holds xstate_size() bytes, 64-byte aligned. Async-signal-safe; usable from
// code compiled with -mgeneral-regs-only.
size_t xstate_size() noexcept;
void xstate_save(void* buf) noexcept;
void xstate_restore(const void* buf) noexcept;

// fn(a, b) with the whole extended state saved around it (on this stack) and put back
// after: whatever fn touches, its caller's vector registers are as they were. The probe
// layer's proof does not follow a call of this function (probe::Analysis::gprs_only):
// code that touches only general-purpose registers but must call out on a rare path
// (the unwinder's search for an object's unwind tables) pays the save there alone.
uint64_t call_saving_xstate(uint64_t (*fn)(uint64_t, uint64_t), uint64_t a, uint64_t b) noexcept;

// ---- fixed code in libutramp ---------------------------------------------------------

// The return trampoline: the address written over a hijacked return address.
uint64_t retprobe_trampoline() noexcept;
// A trap the detour jumps to (with rbx = &regs) when a handler redirected execution;
// the SIGTRAP handler loads every register from that PtRegs.
uint64_t redirect_trap() noexcept;
// At that trap: the PtRegs the detour left (rbx).
const PtRegs* redirect_regs(const ucontext_t* uc) noexcept;

// What the return trampoline and its exception landing call:
//   on_return(regs): regs holds the return registers and rsp just after the return;
//       returns where to continue (the original return address, or a redirection);
//   unwound(sp): an exception or forced unwind passes the hijacked frame whose return
//       address lived at `sp`; returns the original return address.
struct RetprobeCallbacks {
  uint64_t (*on_return)(PtRegs* regs) = nullptr;
  uint64_t (*unwound)(uint64_t sp) = nullptr;
};
void set_retprobe_callbacks(const RetprobeCallbacks& cb) noexcept;

}  // namespace utramp::arch
