// The eBPF instruction set (RFC 9669): encoding, named opcodes, programs.
//
// An instruction is 8 bytes, little-endian:
//
//   byte 0        1              2..3        4..7
//        opcode   dst:4 | src:4  off (s16)   imm (s32)
//
// The opcode's low 3 bits are the class. For ALU/ALU64/JMP/JMP32 the next bit is the
// source (K: imm, X: src register) and the high nibble the operation; for loads and
// stores bits 3-4 are the size and bits 5-7 the mode. The 64-bit immediate load (lddw)
// takes two slots: the second has opcode 0 and carries the high 32 bits in its imm.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace utramp::ebpf {

namespace op {

// Classes.
inline constexpr uint8_t kLd = 0x00, kLdx = 0x01, kSt = 0x02, kStx = 0x03, kAlu = 0x04,
                         kJmp = 0x05, kJmp32 = 0x06, kAlu64 = 0x07;
// Source.
inline constexpr uint8_t kK = 0x00, kX = 0x08;
// ALU operations.
inline constexpr uint8_t kAdd = 0x00, kSub = 0x10, kMul = 0x20, kDiv = 0x30, kOr = 0x40,
                         kAnd = 0x50, kLsh = 0x60, kRsh = 0x70, kNeg = 0x80, kMod = 0x90,
                         kXor = 0xa0, kMov = 0xb0, kArsh = 0xc0, kEnd = 0xd0;
// Byte-swap direction (the source bit of ALU|END); ALU64|END is the unconditional bswap.
inline constexpr uint8_t kToLe = 0x00, kToBe = 0x08;
// Jump operations.
inline constexpr uint8_t kJa = 0x00, kJeq = 0x10, kJgt = 0x20, kJge = 0x30, kJset = 0x40,
                         kJne = 0x50, kJsgt = 0x60, kJsge = 0x70, kCall = 0x80, kExit = 0x90,
                         kJlt = 0xa0, kJle = 0xb0, kJslt = 0xc0, kJsle = 0xd0;
// Load/store sizes.
inline constexpr uint8_t kW = 0x00, kH = 0x08, kB = 0x10, kDW = 0x18;
// Load/store modes.
inline constexpr uint8_t kImm = 0x00, kAbs = 0x20, kInd = 0x40, kMem = 0x60, kMemSx = 0x80,
                         kAtomic = 0xc0;

// Atomic operations (the imm of STX|ATOMIC).
inline constexpr int32_t kFetch = 0x01;
inline constexpr int32_t kAtomicAdd = 0x00, kAtomicOr = 0x40, kAtomicAnd = 0x50,
                         kAtomicXor = 0xa0, kXchg = 0xe0 | kFetch, kCmpxchg = 0xf0 | kFetch;

// The src field of a call: a helper by id, a local function (imm: pc-relative), a kernel
// function by BTF id (not supported here).
inline constexpr uint8_t kCallHelper = 0, kCallLocal = 1, kCallKfunc = 2;

// Whole opcodes that code refers to by name.
inline constexpr uint8_t kLddw = kLd | kImm | kDW;               // 0x18
inline constexpr uint8_t kCallOp = kJmp | kCall;                 // 0x85
inline constexpr uint8_t kCallxOp = kJmp | kCall | kX;           // 0x8d (LLVM's callx)
inline constexpr uint8_t kExitOp = kJmp | kExit;                 // 0x95
inline constexpr uint8_t kJaOp = kJmp | kJa;                     // 0x05
inline constexpr uint8_t kJa32Op = kJmp32 | kJa;                 // 0x06 (gotol: imm offset)

constexpr uint8_t cls(uint8_t code) { return code & 0x07; }
constexpr uint8_t src_bit(uint8_t code) { return code & 0x08; }
constexpr uint8_t alu_op(uint8_t code) { return code & 0xf0; }
constexpr uint8_t jmp_op(uint8_t code) { return code & 0xf0; }
constexpr uint8_t size(uint8_t code) { return code & 0x18; }
constexpr uint8_t mode(uint8_t code) { return code & 0xe0; }
constexpr unsigned size_bytes(uint8_t code) {
  switch (size(code)) {
    case kB: return 1;
    case kH: return 2;
    case kW: return 4;
    default: return 8;
  }
}
constexpr bool is_alu(uint8_t code) { return cls(code) == kAlu || cls(code) == kAlu64; }
constexpr bool is_jmp(uint8_t code) { return cls(code) == kJmp || cls(code) == kJmp32; }

}  // namespace op

inline constexpr int kNumRegs = 11;     // r0..r10
inline constexpr uint8_t kFp = 10;      // r10: read-only frame pointer
inline constexpr uint32_t kStackSize = 512;  // bytes per call frame
inline constexpr uint32_t kMaxFrames = 8;    // the main function and 7 nested local calls

struct Insn {
  uint8_t code = 0;
  uint8_t dst : 4 = 0;
  uint8_t src : 4 = 0;
  int16_t off = 0;
  int32_t imm = 0;

  friend bool operator==(const Insn&, const Insn&) = default;
};
static_assert(sizeof(Insn) == 8, "an eBPF instruction is 8 bytes");

// The 64-bit immediate of the lddw at insns[i] (its second slot is insns[i + 1]).
inline uint64_t imm64(std::span<const Insn> insns, size_t i) {
  return static_cast<uint32_t>(insns[i].imm) |
         (static_cast<uint64_t>(static_cast<uint32_t>(insns[i + 1].imm)) << 32);
}

// A program as loaded: instructions and what the loader knows about them. The engines
// read only `insns`; the rest is for diagnostics and for the loader's later stages.
struct Program {
  std::string name;      // function name, or the data file for test programs
  std::string section;   // ELF section (fentry/FUNC...), empty for assembled programs
  std::vector<Insn> insns;
};

// Instructions from raw little-endian bytes (a multiple of 8).
std::vector<Insn> insns_from_bytes(std::span<const uint8_t> bytes);
std::vector<uint8_t> insns_to_bytes(std::span<const Insn> insns);

// The mnemonic of an ALU operation (op::alu_op: "add", "arsh"; not end) or a conditional
// jump's (op::jmp_op: "jeq", "jsle"), without the "32" of the 32-bit forms; null for
// any other value.
const char* alu_name(uint8_t alu_op);
const char* jmp_name(uint8_t jmp_op);

// Where a jump at `pc` (ja, gotol, a conditional jump) goes: pc + 1 + its offset, which
// gotol (ja32) keeps in imm. Unchecked: check_program() keeps targets in the program.
inline int64_t jump_target(size_t pc, const Insn& n) {
  return static_cast<int64_t>(pc) + 1 + (n.code == op::kJa32Op ? n.imm : n.off);
}

// One instruction in the assembler's syntax ("add32 %r0, 1", "ldxdw %r0, [%r1+8]"),
// jump targets as "+N"/"-N". lddw needs its second slot: pass the whole program and the
// index. Unknown encodings print as ".insn CODE DST SRC OFF IMM".
std::string disassemble_insn(std::span<const Insn> insns, size_t i);
// Every instruction, one per line, prefixed with its index.
std::string disassemble(std::span<const Insn> insns);
// "07 10 00 00 01 00 00 00": the instruction's bytes, for error messages.
std::string insn_hex(const Insn& insn);

}  // namespace utramp::ebpf
