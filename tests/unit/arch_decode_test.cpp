// arch::decode goldens: each row is the bytes of one instruction at kAt, with its
// disassembly asserted beside them, and what the layer must say about it (length,
// control flow, RIP-relative operand and the absolute address it names).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "arch/arch.hpp"
#include "arch_test_util.hpp"

using namespace utramp;
using arch::Flow;
using arch::test::unhex;

namespace {

constexpr uint64_t kAt = 0x401000;

struct DecodeCase {
  const char* bytes;
  const char* text;  // Intel syntax as arch::Insn::text() prints it at kAt
  uint8_t length;
  Flow flow;
  bool relative_branch;
  bool rip_relative;
  uint64_t target;   // branch target or RIP-relative address; 0 when neither
};

// clang-format off
const DecodeCase kCases[] = {
  // Straight-line code.
  {"90",                            "nop",                                 1, Flow::none, false, false, 0},
  {"55",                            "push rbp",                            1, Flow::none, false, false, 0},
  {"48 89 e5",                      "mov rbp, rsp",                        3, Flow::none, false, false, 0},
  {"48 b8 88 77 66 55 44 33 22 11", "mov rax, 0x1122334455667788",        10, Flow::none, false, false, 0},
  // mov rax, [0x401000] through SIB with no base: absolute, not RIP-relative.
  {"48 8b 04 25 00 10 40 00",       "mov rax, [0x0000000000401000]",       8, Flow::none, false, false, 0},
  {"0f 01 d5",                      "xend",                                3, Flow::none, false, false, 0},

  // Relative branches: target = next ip + displacement.
  {"eb 10",                "jmp 0x0000000000401012",       2, Flow::jump,      true, false, 0x401012},
  {"eb fe",                "jmp 0x0000000000401000",       2, Flow::jump,      true, false, 0x401000},
  {"e9 00 01 00 00",       "jmp 0x0000000000401105",       5, Flow::jump,      true, false, 0x401105},
  {"e9 fb ef ff ff",       "jmp 0x0000000000400000",       5, Flow::jump,      true, false, 0x400000},
  {"f2 e9 00 01 00 00",    "bnd jmp 0x0000000000401106",   6, Flow::jump,      true, false, 0x401106},
  {"74 fe",                "jz 0x0000000000401000",        2, Flow::cond_jump, true, false, 0x401000},
  {"7f 7f",                "jnle 0x0000000000401081",      2, Flow::cond_jump, true, false, 0x401081},
  {"2e 74 10",             "jz 0x0000000000401013",        3, Flow::cond_jump, true, false, 0x401013},
  {"0f 85 10 00 00 00",    "jnz 0x0000000000401016",       6, Flow::cond_jump, true, false, 0x401016},
  {"0f 8c 00 f0 ff ff",    "jl 0x0000000000400006",        6, Flow::cond_jump, true, false, 0x400006},
  {"e2 fe",                "loop 0x0000000000401000",      2, Flow::cond_jump, true, false, 0x401000},
  {"e3 fe",                "jrcxz 0x0000000000401000",     2, Flow::cond_jump, true, false, 0x401000},
  {"67 e3 00",             "jecxz 0x0000000000401003",     3, Flow::cond_jump, true, false, 0x401003},
  {"c7 f8 00 00 00 00",    "xbegin 0x0000000000401006",    6, Flow::cond_jump, true, false, 0x401006},
  {"e8 fb ff ff ff",       "call 0x0000000000401000",      5, Flow::call,      true, false, 0x401000},
  {"e8 00 00 00 00",       "call 0x0000000000401005",      5, Flow::call,      true, false, 0x401005},

  // Indirect control flow; a RIP-relative slot is reported as the operand's address.
  {"ff e0",                "jmp rax",                      2, Flow::indirect_jump, false, false, 0},
  {"41 ff e3",             "jmp r11",                      3, Flow::indirect_jump, false, false, 0},
  {"3e ff e0",             "notrack jmp rax",              3, Flow::indirect_jump, false, false, 0},
  {"ff 25 00 00 00 00",    "jmp [0x0000000000401006]",     6, Flow::indirect_jump, false, true, 0x401006},
  {"3e ff 25 10 00 00 00", "notrack jmp [0x0000000000401017]", 7, Flow::indirect_jump, false, true, 0x401017},
  {"ff d0",                "call rax",                     2, Flow::indirect_call, false, false, 0},
  {"3e ff d0",             "notrack call rax",             3, Flow::indirect_call, false, false, 0},
  {"ff 15 10 00 00 00",    "call [0x0000000000401016]",    6, Flow::indirect_call, false, true, 0x401016},

  {"c3",                   "ret",                          1, Flow::ret, false, false, 0},
  {"c2 08 00",             "ret 0x08",                     3, Flow::ret, false, false, 0},
  {"f2 c3",                "bnd ret",                      2, Flow::ret, false, false, 0},

  {"cc",                   "int3",                         1, Flow::trap, false, false, 0},
  {"f1",                   "int1",                         1, Flow::trap, false, false, 0},
  {"cd 80",                "int 0x80",                     2, Flow::trap, false, false, 0},
  {"0f 0b",                "ud2",                          2, Flow::trap, false, false, 0},
  {"f4",                   "hlt",                          1, Flow::trap, false, false, 0},
  {"0f 07",                "sysret",                       2, Flow::trap, false, false, 0},
  {"0f 05",                "syscall",                      2, Flow::syscall, false, false, 0},
  {"0f 34",                "sysenter",                     2, Flow::syscall, false, false, 0},

  // RIP-relative operands: address = next ip + disp32, where "next ip" counts any
  // immediate that follows the displacement.
  {"48 8b 05 10 00 00 00",  "mov rax, [0x0000000000401017]",       7, Flow::none, false, true, 0x401017},
  {"89 05 f0 ff ff ff",     "mov [0x0000000000400FF6], eax",       6, Flow::none, false, true, 0x400ff6},
  {"48 8d 0d 00 00 00 00",  "lea rcx, [0x0000000000401007]",       7, Flow::none, false, true, 0x401007},
  {"48 81 3d 10 00 00 00 78 56 34 12",
                            "cmp qword ptr [0x000000000040101B], 0x12345678",
                                                                  11, Flow::none, false, true, 0x40101b},
  {"80 3d 10 00 00 00 01",  "cmp byte ptr [0x0000000000401017], 0x01", 7, Flow::none, false, true, 0x401017},
  {"c7 05 08 00 00 00 01 00 00 00",
                            "mov dword ptr [0x0000000000401012], 0x01",
                                                                  10, Flow::none, false, true, 0x401012},
  {"f0 48 ff 05 f8 0f 00 00", "lock inc [0x0000000000402000]",     8, Flow::none, false, true, 0x402000},
  {"f2 0f 10 05 20 00 00 00", "movsd xmm0, qword ptr [0x0000000000401028]",
                                                                   8, Flow::none, false, true, 0x401028},
  // VEX (2- and 3-byte) and EVEX: the disp32 sits after a longer prefix.
  {"c5 fd 6f 05 00 01 00 00", "vmovdqa ymm0, [0x0000000000401108]", 8, Flow::none, false, true, 0x401108},
  {"c4 e2 7d 18 05 04 00 00 00", "vbroadcastss ymm0, dword ptr [0x000000000040100D]",
                                                                   9, Flow::none, false, true, 0x40100d},
  {"62 f1 7c 48 28 05 01 00 00 00", "vmovaps zmm0, zmmword ptr [0x000000000040100B]",
                                                                  10, Flow::none, false, true, 0x40100b},
};
// clang-format on

TEST(ArchDecode, Goldens) {
  for (const DecodeCase& c : kCases) {
    SCOPED_TRACE(std::string(c.bytes) + "  // " + c.text);
    const auto bytes = unhex(c.bytes);
    // Trailing bytes that are not part of the instruction must not change the answer.
    const auto padded = [&] {
      auto p = bytes;
      p.insert(p.end(), {0xcc, 0xcc, 0xcc, 0xcc});
      return p;
    }();
    for (const auto* in : {&bytes, &padded}) {
      auto r = arch::decode(in->data(), in->size(), kAt);
      ASSERT_TRUE(r.ok()) << r.error().message;
      EXPECT_EQ(r->address, kAt);
      EXPECT_EQ(r->length, c.length);
      EXPECT_EQ(r->length, bytes.size());
      EXPECT_EQ(arch::test::hex(r->raw()), arch::test::hex(bytes));
      EXPECT_EQ(r->text(), c.text);
      EXPECT_EQ(r->flow, c.flow);
      EXPECT_EQ(r->relative_branch, c.relative_branch);
      EXPECT_EQ(r->rip_relative, c.rip_relative);
      EXPECT_EQ(r->target, c.target);
      EXPECT_FALSE(r->is_endbr64);
      EXPECT_EQ(r->is_nop, std::string_view(c.text) == "nop");
    }
  }
}

TEST(ArchDecode, TargetFollowsTheAddress) {
  // The same bytes decoded at two addresses name targets that move with them.
  const auto jmp = unhex("e9 00 01 00 00");   // jmp +0x100
  const auto mov = unhex("48 8b 05 10 00 00 00");  // mov rax, [rip+0x10]
  for (uint64_t at : {uint64_t{0}, uint64_t{0x7f0012345678}}) {
    auto j = arch::decode(jmp.data(), jmp.size(), at);
    auto m = arch::decode(mov.data(), mov.size(), at);
    ASSERT_TRUE(j.ok() && m.ok());
    EXPECT_EQ(j->target, at + 5 + 0x100);
    EXPECT_EQ(m->target, at + 7 + 0x10);
  }
}

TEST(ArchDecode, NopsOfTheSiteSizes) {
  // The canonical 5-byte site NOP and gcc's 9-byte -fpatchable-function-entry padding.
  {
    auto r = arch::decode(arch::kNop5.data(), arch::kNop5.size(), kAt);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(arch::test::hex(r->raw()), "0f 1f 44 00 00");  // nop [rax+rax*1], eax
    EXPECT_EQ(r->text(), "nop [rax+rax*1], eax");
    EXPECT_EQ(r->length, arch::kSiteLen);
    EXPECT_TRUE(r->is_nop);
    EXPECT_EQ(r->flow, Flow::none);
  }
  {
    const auto nop9 = unhex("66 0f 1f 84 00 00 00 00 00");  // nop [rax+rax*1+0x0], ax
    auto r = arch::decode(nop9.data(), nop9.size(), kAt);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->text(), "nop [rax+rax*1], ax");
    EXPECT_EQ(r->length, 9);
    EXPECT_TRUE(r->is_nop);
  }
  {
    const auto nop2 = unhex("66 90");  // xchg ax, ax
    auto r = arch::decode(nop2.data(), nop2.size(), kAt);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->length, 2);
    EXPECT_TRUE(r->is_nop);
  }
  {
    // A two-byte jmp is not a NOP even when it only skips padding (kJmpShort4).
    auto r = arch::decode(arch::kJmpShort4.data(), arch::kJmpShort4.size(), kAt);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->text(), "jmp 0x0000000000401006");
    EXPECT_FALSE(r->is_nop);
    EXPECT_EQ(r->target, kAt + 2 + 4);
  }
}

TEST(ArchDecode, Endbr64) {
  const auto endbr = unhex("f3 0f 1e fa");  // endbr64
  auto r = arch::decode(endbr.data(), endbr.size(), kAt);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text(), "endbr64");
  EXPECT_EQ(r->length, 4);
  EXPECT_TRUE(r->is_endbr64);
  EXPECT_EQ(r->flow, Flow::none);
  EXPECT_FALSE(r->relative_branch);
  // endbr32 is a different instruction.
  const auto endbr32 = unhex("f3 0f 1e fb");
  auto r32 = arch::decode(endbr32.data(), endbr32.size(), kAt);
  ASSERT_TRUE(r32.ok());
  EXPECT_EQ(r32->text(), "endbr32");
  EXPECT_FALSE(r32->is_endbr64);
}

struct BadCase {
  const char* bytes;
  size_t avail;  // bytes the decoder may read
  Errc code;
  const char* why;
};

TEST(ArchDecode, TruncatedOrUndecodableIsAnError) {
  const BadCase cases[] = {
      {"48 8b 05 10 00", 5, Errc::bad_format, "mov rax, [rip+disp32] cut after 5 of 7 bytes"},
      {"e8 00 00", 3, Errc::bad_format, "call rel32 cut after 3 of 5 bytes"},
      {"0f", 1, Errc::bad_format, "lone escape byte"},
      {"06", 1, Errc::bad_format, "push es: invalid in 64-bit mode"},
      {"f0 90", 2, Errc::bad_format, "lock on an instruction that cannot take it"},
      // The buffer holds the whole instruction but the caller allows only 6 bytes.
      {"48 8b 05 10 00 00 00", 6, Errc::bad_format, "avail shorter than the instruction"},
      // 15 operand-size prefixes + nop: 16 bytes, over the architectural limit.
      {"66 66 66 66 66 66 66 66 66 66 66 66 66 66 66 90", 16, Errc::bad_format,
       "longer than 15 bytes"},
      {"90", 0, Errc::invalid_argument, "nothing to decode"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(std::string(c.bytes) + "  // " + c.why);
    const auto bytes = unhex(c.bytes);
    auto r = arch::decode(bytes.data(), c.avail, kAt);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, c.code);
    if (c.code == Errc::bad_format) {
      // The diagnostic shows the address and the bytes it saw.
      EXPECT_NE(r.error().message.find("0x401000"), std::string::npos) << r.error().message;
      const std::string seen =
          arch::test::hex({bytes.data(), std::min(c.avail, arch::kMaxInsnLen)});
      EXPECT_NE(r.error().message.find(seen), std::string::npos) << r.error().message;
    }
  }
  // The same 7 bytes decode when all of them are allowed.
  const auto full = unhex("48 8b 05 10 00 00 00");
  EXPECT_TRUE(arch::decode(full.data(), 7, kAt).ok());
}

TEST(ArchDecode, Disassemble) {
  // One line per instruction; a byte that starts no instruction is shown as (bad) and
  // decoding resumes at the next byte.
  const auto code = unhex("f3 0f 1e fa 55 48 8b 05 10 00 00 00 06 c3");
  const std::string expected =
      "0x401000: f3 0f 1e fa                    endbr64\n"
      "0x401004: 55                             push rbp\n"
      "0x401005: 48 8b 05 10 00 00 00           mov rax, [0x000000000040101C]\n"
      "0x40100c: 06  (bad)\n"
      "0x40100d: c3                             ret\n";
  EXPECT_EQ(arch::disassemble(code, kAt), expected);
  EXPECT_EQ(arch::disassemble({}, kAt), "");
}

}  // namespace
