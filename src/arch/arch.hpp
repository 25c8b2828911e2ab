// The architecture interface: everything that knows machine code goes through these
// functions. The implementation is chosen at build time (src/arch/x86_64/ today); feature
// code includes only this header and never an assembler or decoder directly.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/result.hpp"

struct ucontext_t;  // glibc's tag is `struct ucontext_t`

namespace utramp::arch {

inline constexpr size_t kMaxInsnLen = 15;
// A patched site holds one call or jmp with a 32-bit displacement.
inline constexpr size_t kSiteLen = 5;
inline constexpr uint8_t kTrapByte = 0xcc;  // int3
inline constexpr size_t kTrapLen = 1;

using SiteBytes = std::array<uint8_t, kSiteLen>;

// The canonical site: one 5-byte NOP (nopl 0x0(%rax,%rax,1)).
extern const SiteBytes kNop5;
inline constexpr uint8_t kNop1 = 0x90;
// jmp +4: what follows the NOP when an XRay sled is canonicalised.
inline constexpr std::array<uint8_t, 2> kJmpShort4 = {0xeb, 0x04};

enum class Flow : uint8_t {
  none,           // falls through
  jump,           // jmp rel
  cond_jump,      // jcc rel, loop, jrcxz
  call,           // call rel32
  indirect_jump,  // jmp r/m
  indirect_call,  // call r/m
  ret,
  trap,           // int3, int n, ud2, hlt...
  syscall,
};

struct Insn {
  uint64_t address = 0;
  uint8_t length = 0;
  std::array<uint8_t, kMaxInsnLen> bytes{};
  Flow flow = Flow::none;
  bool relative_branch = false;  // has a relative immediate (jmp/jcc/call/loop/xbegin)
  bool rip_relative = false;     // has a RIP-relative memory operand
  bool is_nop = false;
  bool is_endbr64 = false;
  uint64_t target = 0;           // branch target or RIP-relative memory address
  std::string text() const;      // Intel syntax
  std::span<const uint8_t> raw() const { return {bytes.data(), length}; }
};

// Decodes one instruction at `address` from `code` (at most `avail` bytes readable).
Result<Insn> decode(const uint8_t* code, size_t avail, uint64_t address);

// The patch-site flavours compilers plant at a function's entry, as bytes of this
// architecture (the sites layer decides what each means for a function):
//   nop5               one 5-byte NOP (any encoding)
//   nop1x5             five 1-byte NOPs (gcc -fpatchable-function-entry=5)
//   call_rel32         a 5-byte call (-pg -mfentry: call __fentry__), target set
//   call_rip_indirect  a 6-byte call through a RIP-relative slot (the same under PIE),
//                      target = the slot's address
//   xray_sled          a 2-byte jump over a 9-byte NOP (clang -fxray-instrument)
struct EntryPattern {
  enum class Kind : uint8_t { none, nop5, nop1x5, call_rel32, call_rip_indirect, xray_sled };
  Kind kind = Kind::none;
  uint8_t len = 0;      // bytes the site covers
  uint64_t target = 0;  // call target, or slot address
};
// Bytes of a landing pad (endbr64) at the start of `code`, 0 if none: the site follows it.
size_t landing_pad_length(std::span<const uint8_t> code) noexcept;
// The flavour at `code` (placed at `at`).
EntryPattern classify_entry(std::span<const uint8_t> code, uint64_t at);

// The instructions a function runs between its entry (after any endbr64) and a
// profiling call made once its frame is set up (gcc and clang `-pg` without -mfentry:
// `push rbp; mov rbp, rsp; ...; call mcount`), when their effect can be undone from the
// call: the registers they change were pushed first (restored from their slots), the
// memory they write is the frame's, and `leave` then gives back the entry's rsp and rbp.
// `code` is [entry, call), an endbr64 first included. Refused, naming the instruction (offset, text, bytes), when
// something else is there.
struct FrameUndo {
  struct Push {
    uint8_t reg;     // GPR number (rax 0 .. r15 15)
    int32_t offset;  // its slot, from rbp
  };
  std::vector<Push> pushes;  // registers pushed after `mov rbp, rsp`, in order
  size_t frame_at = 0;       // bytes up to the end of `mov rbp, rsp`
};
Result<FrameUndo> frame_undo(std::span<const uint8_t> code, uint64_t at);

// "addr: bytes  text" per line, for diagnostics and goldens.
std::string disassemble(std::span<const uint8_t> code, uint64_t address);

// Relocation: a run of whole instructions copied from `from` to execute at `to`, with
// the same effect. RIP-relative operands are re-targeted, jmp/jcc rel8 widened to rel32,
// call rel32 keeps calling the same target. Refused (Errc::out_of_range /
// Errc::unsupported / Errc::not_instruction_boundary) with the reason in the message when
// a displacement cannot reach, a branch inside the run targets the middle of the run, or
// the form cannot be proven correct (loop/jrcxz/xbegin, ...).
struct Relocated {
  std::vector<uint8_t> code;
  // Offsets in `code` where each source instruction starts (same order as the source).
  std::vector<uint32_t> insn_offsets;
};
Result<Relocated> relocate(std::span<const uint8_t> code, uint64_t from, uint64_t to);

// Whether `target` is reachable with a rel32 from an instruction ending at `next_ip`.
bool rel32_reaches(uint64_t next_ip, uint64_t target) noexcept;
// The widest window [lo, hi) every byte of which is reachable by rel32 from `next_ip`
// and from which `next_ip` is reachable, clamped to user space.
struct Window { uint64_t lo, hi; };
Window rel32_window(uint64_t addr) noexcept;

// 5-byte call/jmp at `at` to `target`; out_of_range if not reachable.
Result<SiteBytes> encode_call(uint64_t at, uint64_t target);
Result<SiteBytes> encode_jmp(uint64_t at, uint64_t target);
// `jmp target` placed at `at`, rel32 where it reaches, else an absolute indirect jump.
Result<std::vector<uint8_t>> encode_jump_anywhere(uint64_t at, uint64_t target);

// The stub a hooked GOT slot points to (ftrace/libcall.hpp), entered by the program's
// call through the slot (the return address at [rsp], the call's arguments in place):
// loads `hook` into r11 (scratch at every call through a PLT or GOT: the ABI's
// resolver-clobbered register) and jumps to `entry`, which reads it there.
//
//   mov r11, hook
//   jmp qword ptr [rip + 0]
//   .quad entry
Result<std::vector<uint8_t>> emit_import_stub(uint64_t base, uint64_t hook, uint64_t entry);

// A stub for tests and benchmarks, reached by `call` from a site: increments the 64-bit
// counter at `counter` atomically, preserves every register and flag the caller relies
// on, and returns to the site's next instruction.
Result<std::vector<uint8_t>> emit_counting_stub(uint64_t base, uint64_t counter);

// Trap context access (signal handlers): the interrupted instruction pointer and stack.
uint64_t ctx_ip(const ucontext_t* uc) noexcept;
void ctx_set_ip(ucontext_t* uc, uint64_t ip) noexcept;
uint64_t ctx_sp(const ucontext_t* uc) noexcept;
void ctx_set_sp(ucontext_t* uc, uint64_t sp) noexcept;
// Makes the interrupted thread continue as if it had executed `call target` with
// `return_to` as the return address (pushed on its stack).
void ctx_emulate_call(ucontext_t* uc, uint64_t target, uint64_t return_to) noexcept;
// Address of the trap instruction that raised SIGTRAP, given the reported ip.
inline uint64_t trap_address_from_ip(uint64_t ip) noexcept { return ip - kTrapLen; }

}  // namespace utramp::arch
