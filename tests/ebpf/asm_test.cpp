// The assembler (encodings as byte goldens, errors with their line), the disassembler,
// and the structural checker (each rule, with the message naming the instruction).
#include <gtest/gtest.h>

#include "ebpf/asm.hpp"
#include "ebpf/check.hpp"
#include "ebpf/insn.hpp"

namespace {

using namespace utramp;
using namespace utramp::ebpf;

std::string hex_of(const std::vector<Insn>& p) {
  std::string out;
  for (const Insn& i : p) out += (out.empty() ? "" : " | ") + insn_hex(i);
  return out;
}

std::vector<Insn> must_assemble(std::string_view text) {
  auto r = assemble(text);
  EXPECT_TRUE(r) << text << ": " << r.error().message;
  return r ? *r : std::vector<Insn>{};
}

struct Golden {
  const char* text;
  const char* bytes;
};

// Encodings from RFC 9669's tables.
const Golden kGoldens[] = {
    {"mov32 %r0, 0", "b4 00 00 00 00 00 00 00"},
    {"mov %r1, -1", "b7 01 00 00 ff ff ff ff"},
    {"add32 %r0, %r1", "0c 10 00 00 00 00 00 00"},
    {"sdiv %r2, -3", "37 02 01 00 fd ff ff ff"},
    {"smod32 %r2, %r3", "9c 32 01 00 00 00 00 00"},
    {"neg %r9", "87 09 00 00 00 00 00 00"},
    {"movsx864 %r1, %r2", "bf 21 08 00 00 00 00 00"},
    {"movsx1632 %r1, %r2", "bc 21 10 00 00 00 00 00"},
    {"movsx3264 %r1, %r2", "bf 21 20 00 00 00 00 00"},
    {"le16 %r3", "d4 03 00 00 10 00 00 00"},
    {"be64 %r3", "dc 03 00 00 40 00 00 00"},
    {"bswap32 %r3", "d7 03 00 00 20 00 00 00"},
    {"swap16 %r3", "d7 03 00 00 10 00 00 00"},
    {"lddw %r0, 0x1122334455667788", "18 00 00 00 88 77 66 55 | 00 00 00 00 44 33 22 11"},
    {"lddw %r0, -1", "18 00 00 00 ff ff ff ff | 00 00 00 00 ff ff ff ff"},
    {"ldxb %r0, [%r1+0x2]", "71 10 02 00 00 00 00 00"},
    {"ldxdw %r0, [%r10-8]", "79 a0 f8 ff 00 00 00 00"},
    {"ldxsh %r0, [%r1]", "89 10 00 00 00 00 00 00"},
    {"ldxsw %r0, [%r1+4]", "81 10 04 00 00 00 00 00"},
    {"stw [%r1+4], 0xffffffff", "62 01 04 00 ff ff ff ff"},
    {"stxh [%r10-2], %r3", "6b 3a fe ff 00 00 00 00"},
    {"lock add [%r10-8], %r1", "db 1a f8 ff 00 00 00 00"},
    {"lock fetch add32 [%r1+4], %r2", "c3 21 04 00 01 00 00 00"},
    {"lock fetch xor [%r1], %r2", "db 21 00 00 a1 00 00 00"},
    {"lock xchg [%r1], %r2", "db 21 00 00 e1 00 00 00"},
    {"lock cmpxchg32 [%r1], %r2", "c3 21 00 00 f1 00 00 00"},
    {"jeq %r1, 3, +2", "15 01 02 00 03 00 00 00"},
    {"jslt32 %r1, %r2, -1", "ce 21 ff ff 00 00 00 00"},
    {"jne32 %r2, 0xffffff80, +0", "56 02 00 00 80 ff ff ff"},
    {"ja -1", "05 00 ff ff 00 00 00 00"},
    {"ja32 +5", "06 00 00 00 05 00 00 00"},
    {"call 5", "85 00 00 00 05 00 00 00"},
    {"call local +3", "85 10 00 00 03 00 00 00"},
    {"call %r2", "8d 02 00 00 00 00 00 00"},
    {"exit", "95 00 00 00 00 00 00 00"},
};

TEST(EbpfAsm, Encodings) {
  for (const Golden& g : kGoldens) {
    auto p = must_assemble(g.text);
    EXPECT_EQ(hex_of(p), g.bytes) << g.text;
    // And back: the disassembly of the bytes assembles to the same bytes.
    ASSERT_FALSE(p.empty());
    auto again = must_assemble(disassemble_insn(p, 0));
    EXPECT_EQ(again, p) << g.text << " -> " << disassemble_insn(p, 0);
  }
}

TEST(EbpfAsm, LabelsAndComments) {
  auto p = must_assemble(
      "  mov %r0, 0   # a comment\n"
      "again: add %r0, 1\n"
      "jlt %r0, 10, again\n"
      "call local fn\n"
      "ja exit\n"
      "fn:\n"
      "exit\n");
  ASSERT_EQ(p.size(), 6u);
  EXPECT_EQ(p[2].off, -2);   // to `again` (index 1) from index 2
  EXPECT_EQ(p[3].imm, 1);    // fn is index 5
  EXPECT_EQ(p[4].off, 0);    // `exit` means the first exit instruction
  EXPECT_EQ(p[3].src, op::kCallLocal);
}

TEST(EbpfAsm, LddwCountsTwoSlots) {
  auto p = must_assemble("ja out\nlddw %r1, 1\nout: exit\n");
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].off, 2);
}

TEST(EbpfAsm, Errors) {
  struct Bad {
    const char* text;
    const char* message;
  };
  const Bad bad[] = {
      {"mov %r0, 1\nmov %r11, 1\n", "line 2: Invalid register: %r11"},
      {"add %r0\n", "line 1: Invalid number of operands for mnemonic: add"},
      {"movq %r0, 1\n", "line 1: Invalid mnemonic: movq"},
      {"mov32 %r0, -2147483649\n", "line 1: Invalid immediate: -2147483649 does not fit in 32 bits"},
      {"ldxw %r0, [%r1-32769]\n", "line 1: Invalid offset: -32769 does not fit in 16 bits"},
      {"x:\nx:\nexit\n", "line 2: Duplicate label: x"},
      {"\n\nja nowhere\n", "line 3: Invalid label: nowhere"},
      {"lock fetch xchg [%r1], %r2\n", "line 1: Invalid atomic operation: lock fetch xchg"},
      {"lock nand [%r1], %r2\n", "line 1: Invalid atomic operation: lock nand"},
      {"call far 3\n", "line 1: Invalid call mode: far"},
      {"ja +40000\n", "line 1: Invalid jump offset: +40000"},
      {"lddw %r0, 0x10000000000000000\n", "line 1: Invalid immediate: 0x10000000000000000 does not fit in 64 bits"},
  };
  for (const Bad& b : bad) {
    auto r = assemble(b.text);
    ASSERT_FALSE(r) << b.text;
    EXPECT_EQ(r.error().message, b.message);
    EXPECT_EQ(r.error().code, Errc::bad_format);
  }
  // Line numbers start where the caller says the text starts.
  auto r = assemble("exit\nmov %r0, %r12\n", 10);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "line 11: Invalid register: %r12");
}

TEST(EbpfAsm, FarJumpToLabel) {
  std::string text = "ja end\n";
  for (int i = 0; i < 40000; ++i) text += "mov %r0, 0\n";
  text += "end: exit\n";
  auto r = assemble(text);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "line 1: Jump to end out of range: 40000 instructions");
}

TEST(EbpfDisasm, Listing) {
  auto p = must_assemble("lddw %r1, 0x100000000\nldxsb %r0, [%r1-1]\nlock fetch or32 [%r10-4], %r0\nexit\n");
  EXPECT_EQ(disassemble(p),
            "   0: lddw %r1, 0x100000000\n"
            "   2: ldxsb %r0, [%r1-1]\n"
            "   3: lock fetch or32 [%r10-4], %r0\n"
            "   4: exit\n");
  Insn junk;
  junk.code = 0xff;
  EXPECT_EQ(disassemble_insn(std::vector<Insn>{junk}, 0), ".insn 0xff 0 0 0 0");
}

// --- the checker ------------------------------------------------------------------------

Result<void> check_text(std::string_view text, const HelperTable* helpers = nullptr) {
  auto p = assemble(text);
  EXPECT_TRUE(p) << p.error().message;
  return check_program(*p, helpers);
}

Result<void> check_raw(std::vector<Insn> p, const HelperTable* helpers = nullptr) {
  return check_program(p, helpers);
}

Insn raw(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  Insn i;
  i.code = code;
  i.dst = dst;
  i.src = src;
  i.off = off;
  i.imm = imm;
  return i;
}

const Insn kExit = raw(op::kExitOp, 0, 0, 0, 0);

TEST(EbpfCheck, AcceptsValidPrograms) {
  HelperTable h;
  ASSERT_TRUE(h.add(7, "prandom", [](uint64_t, uint64_t, uint64_t, uint64_t, uint64_t) -> uint64_t { return 4; }));
  EXPECT_TRUE(check_text("call 7\nja +0\nexit\n", &h));
  EXPECT_TRUE(check_text("mov %r0, 0\nja -2\n"));  // a loop: ends by ja, fine here
}

TEST(EbpfCheck, Rules) {
  struct Bad {
    std::vector<Insn> p;
    Errc code;
    const char* message;
  };
  const Bad bad[] = {
      {{}, Errc::bad_format, "program has no instructions"},
      {{raw(0xb7, 0, 0, 0, 0)}, Errc::bad_format,
       "insn 0 (mov %r0, 0; b7 00 00 00 00 00 00 00): execution falls off the end of the program"},
      {{kExit, raw(0x15, 0, 0, -2, 0)}, Errc::bad_format, "insn 1 (jeq %r0, 0, -2; 15 00 fe ff 00 00 00 00): execution falls off the end"},
      {{raw(0x05, 0, 0, 5, 0), kExit}, Errc::out_of_range,
       "insn 0 (ja +5; 05 00 05 00 00 00 00 00): jump target 6 outside the program (0..1)"},
      {{raw(0x05, 0, 0, 1, 0), raw(0x18, 0, 0, 0, 0), raw(0, 0, 0, 0, 0), kExit}, Errc::bad_format,
       "jump target 2 is the second slot of a lddw"},
      {{raw(0xb7, 10, 0, 0, 0), kExit}, Errc::bad_format, "r10 (the frame pointer) is read-only"},
      {{raw(0xbf, 0, 11, 0, 0), kExit}, Errc::bad_format, "invalid register src=r11"},
      {{raw(0x18, 1, 1, 0, 3), raw(0, 0, 0, 0, 0), kExit}, Errc::bad_format,
       "lddw with src=1 (a map or BTF reference) the loader has not resolved"},
      {{raw(0x18, 1, 0, 0, 3)}, Errc::bad_format, "lddw without its second slot"},
      {{raw(0x18, 1, 0, 0, 3), raw(0, 0, 0, 0, 0)}, Errc::bad_format, "falls off the end"},
      {{raw(0x18, 1, 0, 0, 3), raw(0x18, 0, 0, 0, 0), kExit}, Errc::bad_format,
       "second slot of lddw (18 00 00 00 00 00 00 00) must have only imm set"},
      {{raw(0x85, 0, 0, 0, 6), kExit}, Errc::not_found, "unknown helper 6 (bpf_trace_printk): not provided here"},
      {{raw(0x85, 0, 0, 0, 100000), kExit}, Errc::not_found, "unknown helper 100000"},
      {{raw(0x85, 0, 2, 0, 0), kExit}, Errc::unsupported, "kernel function calls (kfuncs) are not supported"},
      {{raw(0x85, 0, 1, 0, 5), kExit}, Errc::out_of_range, "local call target 6 outside the program"},
      {{raw(0x20, 0, 0, 0, 0), kExit}, Errc::unsupported, "legacy packet access (ld abs/ind) is not supported"},
      {{raw(0xdb, 1, 2, 0, 0x02), kExit}, Errc::bad_format, "unknown atomic operation 0x2"},
      {{raw(0xdb, 1, 10, 0, 0xe1), kExit}, Errc::bad_format, "r10 (the frame pointer) is read-only"},
      {{raw(0xd3, 1, 2, 0, 0), kExit}, Errc::bad_format, "unknown opcode"},   // 16-bit atomic
      {{raw(0x99, 1, 0, 0, 0), kExit}, Errc::bad_format, "unknown opcode"},   // ldxsdw
      {{raw(0x86, 0, 0, 0, 0), kExit}, Errc::bad_format, "unknown opcode (call is a JMP-class instruction)"},
      {{raw(0xdf, 1, 0, 0, 16), kExit}, Errc::bad_format, "unknown opcode (bswap has no X form)"},
      {{raw(0xd4, 1, 0, 0, 8), kExit}, Errc::bad_format, "byte swap width 8 is not 16, 32 or 64"},
      {{raw(0x3f, 1, 2, 2, 0), kExit}, Errc::bad_format, "off of a division must be 0 or 1 (signed), is 2"},
      {{raw(0xe7, 1, 0, 0, 0), kExit}, Errc::bad_format, "unknown opcode"},
      {{raw(0xe5, 1, 0, 0, 0), kExit}, Errc::bad_format, "unknown opcode"},
      {{raw(0x8d, 1, 0, 0, 1), kExit}, Errc::bad_format, "reserved field imm must be 0, is 1"},
  };
  for (const Bad& b : bad) {
    auto r = check_raw(b.p);
    ASSERT_FALSE(r) << b.message;
    EXPECT_NE(r.error().message.find(b.message), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().code, b.code) << r.error().message;
  }
}

TEST(EbpfCheck, TooBig) {
  std::vector<Insn> p(kMaxInsns + 1, raw(0xb7, 0, 0, 0, 0));
  p.back() = kExit;
  auto r = check_raw(p);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::too_big);
}

}  // namespace
