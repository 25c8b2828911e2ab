// arch::relocate goldens. Each row is a run of source bytes at `from`, the bytes
// expected at `to`, and the disassembly of those bytes at `to` (asserted, so it cannot
// drift from the hex). Zydis prints branch targets and RIP-relative operands as absolute
// addresses: in every listing below, an address equal to the source's means the copy
// names the same place.
//
// Besides the golden bytes, every successful relocation is decoded back and compared
// with its source instruction by instruction (expect_same_effect).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "arch/arch.hpp"
#include "arch_test_util.hpp"

using namespace utramp;
using arch::test::decode_run;
using arch::test::hex;
using arch::test::listing;
using arch::test::unhex;

namespace {

constexpr uint64_t kFrom = 0x10000000;
constexpr uint64_t kUp = kFrom + 0x100000;    // the copy 1 MiB above the source
constexpr uint64_t kDown = kFrom - 0x100000;  // the copy 1 MiB below the source

// The source decoded at `from` and the copy decoded at `to` must be the same
// instructions naming the same absolute addresses. The one exception is a relative
// branch to another instruction of the run, which must land on that instruction's copy.
// A branch to the run's first instruction is not redirected: that address is the site,
// which stays a whole instruction (the patched call/jmp), so going through it again is
// what the original program does.
void expect_same_effect(std::span<const uint8_t> src, uint64_t from, const arch::Relocated& r,
                        uint64_t to) {
  const auto s = decode_run(src, from);
  const auto o = decode_run(r.code, to);
  ASSERT_EQ(r.insn_offsets.size(), s.size());
  ASSERT_EQ(o.size(), s.size()) << "the copy holds a different number of instructions";
  const uint64_t end = from + src.size();
  for (size_t i = 0; i < s.size(); ++i) {
    SCOPED_TRACE("source instruction " + std::to_string(i) + ": " + s[i].text());
    EXPECT_EQ(o[i].address, to + r.insn_offsets[i]) << "insn_offsets disagree with the code";
    EXPECT_EQ(o[i].flow, s[i].flow);
    EXPECT_EQ(o[i].relative_branch, s[i].relative_branch);
    EXPECT_EQ(o[i].rip_relative, s[i].rip_relative);
    if (s[i].relative_branch) {
      uint64_t want = s[i].target;
      if (s[i].target > from && s[i].target < end) {
        bool found = false;
        for (size_t k = 0; k < s.size(); ++k)
          if (s[k].address == s[i].target) {
            want = to + r.insn_offsets[k];
            found = true;
          }
        EXPECT_TRUE(found) << "a relocated branch into the middle of an instruction";
      }
      EXPECT_EQ(o[i].target, want);
      // Same mnemonic and prefixes; only the displacement width may differ.
      if (want == s[i].target) {
        EXPECT_EQ(o[i].text(), s[i].text());
      }
    } else if (s[i].rip_relative) {
      EXPECT_EQ(o[i].target, s[i].target);
      EXPECT_EQ(o[i].length, s[i].length);
      EXPECT_EQ(o[i].text(), s[i].text());
    } else {
      EXPECT_EQ(hex(o[i].raw()), hex(s[i].raw())) << "position-independent: copied verbatim";
    }
  }
}

struct Golden {
  const char* name;
  const char* in;       // at `from`
  const char* out;      // expected at `to`
  const char* listing;  // disassembly of `out` at `to`
};

void expect_golden(const Golden& g, uint64_t from, uint64_t to) {
  SCOPED_TRACE(std::string(g.name) + ": " + g.in + "  ->  " + g.out + "  // " + g.listing);
  const auto in = unhex(g.in);
  auto r = arch::relocate(in, from, to);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(hex(r->code), hex(unhex(g.out)));
  EXPECT_EQ(listing(r->code, to), g.listing);
  expect_same_effect(in, from, *r, to);
}

// clang-format off
const Golden kVerbatim[] = {
  {"prologue",           "55 48 89 e5 48 83 ec 10", "55 48 89 e5 48 83 ec 10", "push rbp; mov rbp, rsp; sub rsp, 0x10"},
  {"endbr64 then push",  "f3 0f 1e fa 55",          "f3 0f 1e fa 55",          "endbr64; push rbp"},
  {"nop5",               "0f 1f 44 00 00",          "0f 1f 44 00 00",          "nop [rax+rax*1], eax"},
  {"movabs",             "48 b8 88 77 66 55 44 33 22 11", "48 b8 88 77 66 55 44 33 22 11", "mov rax, 0x1122334455667788"},
  {"absolute disp32",    "48 8b 04 25 00 10 40 00", "48 8b 04 25 00 10 40 00", "mov rax, [0x0000000000401000]"},
  {"indirect jmp",       "ff e0",                   "ff e0",                   "jmp rax"},
  {"notrack jmp (CET)",  "3e ff e0",                "3e ff e0",                "notrack jmp rax"},
  {"indirect call",      "ff d0",                   "ff d0",                   "call rax"},
  {"bnd ret",            "f2 c3",                   "f2 c3",                   "bnd ret"},
  {"ret imm16",          "c2 08 00",                "c2 08 00",                "ret 0x08"},
  {"int3",               "cc",                      "cc",                      "int3"},
  {"ud2",                "0f 0b",                   "0f 0b",                   "ud2"},
  {"syscall",            "0f 05",                   "0f 05",                   "syscall"},
};

// Copy 1 MiB up: every disp32 drops by 0x100000.
const Golden kRipUp[] = {
  {"load",               "48 8b 05 10 00 00 00",    "48 8b 05 10 00 f0 ff",    "mov rax, [0x0000000010000017]"},
  {"load r15 (REX.R)",   "4c 8b 3d 10 00 00 00",    "4c 8b 3d 10 00 f0 ff",    "mov r15, [0x0000000010000017]"},
  {"store",              "89 05 f0 ff ff ff",       "89 05 f0 ff ef ff",       "mov [0x000000000FFFFFF6], eax"},
  {"lea",                "48 8d 0d 00 00 00 00",    "48 8d 0d 00 00 f0 ff",    "lea rcx, [0x0000000010000007]"},
  // The immediate follows the displacement: only the 4 disp bytes change.
  {"cmp imm32",          "48 81 3d 10 00 00 00 78 56 34 12", "48 81 3d 10 00 f0 ff 78 56 34 12",
                         "cmp qword ptr [0x000000001000001B], 0x12345678"},
  {"cmp imm16",          "66 81 3d 10 00 00 00 34 12", "66 81 3d 10 00 f0 ff 34 12",
                         "cmp word ptr [0x0000000010000019], 0x1234"},
  {"cmp imm8",           "48 83 3d 10 00 00 00 00", "48 83 3d 10 00 f0 ff 00",
                         "cmp qword ptr [0x0000000010000018], 0x00"},
  {"cmp byte imm8",      "80 3d 10 00 00 00 01",    "80 3d 10 00 f0 ff 01",    "cmp byte ptr [0x0000000010000017], 0x01"},
  {"mov byte imm8",      "c6 05 10 00 00 00 ff",    "c6 05 10 00 f0 ff ff",    "mov byte ptr [0x0000000010000017], 0xFF"},
  {"mov dword imm32",    "c7 05 08 00 00 00 01 00 00 00", "c7 05 08 00 f0 ff 01 00 00 00",
                         "mov dword ptr [0x0000000010000012], 0x01"},
  {"lock inc",           "f0 48 ff 05 f8 0f 00 00", "f0 48 ff 05 f8 0f f0 ff", "lock inc [0x0000000010001000]"},
  {"jmp [rip+x]",        "ff 25 10 00 00 00",       "ff 25 10 00 f0 ff",       "jmp [0x0000000010000016]"},
  {"call [rip+x]",       "ff 15 10 00 00 00",       "ff 15 10 00 f0 ff",       "call [0x0000000010000016]"},
  {"notrack jmp [rip+x]", "3e ff 25 10 00 00 00",   "3e ff 25 10 00 f0 ff",    "notrack jmp [0x0000000010000017]"},
  {"SSE movsd",          "f2 0f 10 05 20 00 00 00", "f2 0f 10 05 20 00 f0 ff", "movsd xmm0, qword ptr [0x0000000010000028]"},
  {"SSE movdqa",         "66 0f 6f 05 30 00 00 00", "66 0f 6f 05 30 00 f0 ff", "movdqa xmm0, [0x0000000010000038]"},
  {"VEX2 vmovdqa",       "c5 fd 6f 05 00 01 00 00", "c5 fd 6f 05 00 01 f0 ff", "vmovdqa ymm0, [0x0000000010000108]"},
  {"VEX3 vbroadcastss",  "c4 e2 7d 18 05 04 00 00 00", "c4 e2 7d 18 05 04 00 f0 ff",
                         "vbroadcastss ymm0, dword ptr [0x000000001000000D]"},
  {"VEX3 with imm8",     "c4 e3 79 16 05 10 00 00 00 01", "c4 e3 79 16 05 10 00 f0 ff 01",
                         "vpextrd dword ptr [0x000000001000001A], xmm0, 0x01"},
  {"EVEX vmovaps",       "62 f1 7c 48 28 05 01 00 00 00", "62 f1 7c 48 28 05 01 00 f0 ff",
                         "vmovaps zmm0, zmmword ptr [0x000000001000000B]"},
};

// Copy 1 MiB down: every disp32 grows by 0x100000.
const Golden kRipDown[] = {
  {"load",               "48 8b 05 10 00 00 00",    "48 8b 05 10 00 10 00",    "mov rax, [0x0000000010000017]"},
  {"store",              "89 05 f0 ff ff ff",       "89 05 f0 ff 0f 00",       "mov [0x000000000FFFFFF6], eax"},
  {"cmp imm32",          "48 81 3d 10 00 00 00 78 56 34 12", "48 81 3d 10 00 10 00 78 56 34 12",
                         "cmp qword ptr [0x000000001000001B], 0x12345678"},
  {"VEX2 vmovdqa",       "c5 fd 6f 05 00 01 00 00", "c5 fd 6f 05 00 01 10 00", "vmovdqa ymm0, [0x0000000010000108]"},
  {"jmp [rip+x]",        "ff 25 10 00 00 00",       "ff 25 10 00 10 00",       "jmp [0x0000000010000016]"},
};

// Copy 1 MiB up: rel8 becomes rel32, targets stay.
const Golden kBranchUp[] = {
  {"jmp rel8",           "eb 10",                   "e9 0d 00 f0 ff",          "jmp 0x0000000010000012"},
  {"jmp rel8 backward",  "eb 80",                   "e9 7d ff ef ff",          "jmp 0x000000000FFFFF82"},
  {"jmp rel32",          "e9 00 01 00 00",          "e9 00 01 f0 ff",          "jmp 0x0000000010000105"},
  {"jz rel32",           "0f 84 00 01 00 00",       "0f 84 00 01 f0 ff",       "jz 0x0000000010000106"},
  {"call rel32",         "e8 00 01 00 00",          "e8 00 01 f0 ff",          "call 0x0000000010000105"},
  {"call rel32 backward", "e8 00 00 00 ff",         "e8 00 00 f0 fe",          "call 0x000000000F000005"},
  // MPX's BND prefix (F2) is kept and counted in the length the rel32 is taken from.
  {"bnd jmp rel32",      "f2 e9 00 01 00 00",       "f2 e9 00 01 f0 ff",       "bnd jmp 0x0000000010000106"},
  {"bnd call rel32",     "f2 e8 00 01 00 00",       "f2 e8 00 01 f0 ff",       "bnd call 0x0000000010000106"},
  {"bnd jz rel32",       "f2 0f 84 00 01 00 00",    "f2 0f 84 00 01 f0 ff",    "bnd jz 0x0000000010000107"},
  {"bnd jz rel8",        "f2 74 10",                "f2 0f 84 0c 00 f0 ff",    "bnd jz 0x0000000010000013"},
  // Branch-hint prefixes (2E not taken, 3E taken) are kept too.
  {"jz rel8, hint 2e",   "2e 74 10",                "2e 0f 84 0c 00 f0 ff",    "jz 0x0000000010000013"},
  {"jnz rel8, hint 3e",  "3e 75 10",                "3e 0f 85 0c 00 f0 ff",    "jnz 0x0000000010000013"},
};

const Golden kBranchDown[] = {
  {"jmp rel8",           "eb 10",                   "e9 0d 00 10 00",          "jmp 0x0000000010000012"},
  {"jz rel8",            "74 10",                   "0f 84 0c 00 10 00",       "jz 0x0000000010000012"},
  {"call rel32",         "e8 00 01 00 00",          "e8 00 01 10 00",          "call 0x0000000010000105"},
  {"bnd jmp rel32",      "f2 e9 00 01 00 00",       "f2 e9 00 01 10 00",       "bnd jmp 0x0000000010000106"},
};

// Every condition code: jcc rel8 (70+cc) becomes jcc rel32 (0f 80+cc) to the same place.
const Golden kJccUp[] = {
  {"jo",   "70 10", "0f 80 0c 00 f0 ff", "jo 0x0000000010000012"},
  {"jno",  "71 10", "0f 81 0c 00 f0 ff", "jno 0x0000000010000012"},
  {"jb",   "72 10", "0f 82 0c 00 f0 ff", "jb 0x0000000010000012"},
  {"jnb",  "73 10", "0f 83 0c 00 f0 ff", "jnb 0x0000000010000012"},
  {"jz",   "74 10", "0f 84 0c 00 f0 ff", "jz 0x0000000010000012"},
  {"jnz",  "75 10", "0f 85 0c 00 f0 ff", "jnz 0x0000000010000012"},
  {"jbe",  "76 10", "0f 86 0c 00 f0 ff", "jbe 0x0000000010000012"},
  {"jnbe", "77 10", "0f 87 0c 00 f0 ff", "jnbe 0x0000000010000012"},
  {"js",   "78 10", "0f 88 0c 00 f0 ff", "js 0x0000000010000012"},
  {"jns",  "79 10", "0f 89 0c 00 f0 ff", "jns 0x0000000010000012"},
  {"jp",   "7a 10", "0f 8a 0c 00 f0 ff", "jp 0x0000000010000012"},
  {"jnp",  "7b 10", "0f 8b 0c 00 f0 ff", "jnp 0x0000000010000012"},
  {"jl",   "7c 10", "0f 8c 0c 00 f0 ff", "jl 0x0000000010000012"},
  {"jnl",  "7d 10", "0f 8d 0c 00 f0 ff", "jnl 0x0000000010000012"},
  {"jle",  "7e 10", "0f 8e 0c 00 f0 ff", "jle 0x0000000010000012"},
  {"jnle", "7f 10", "0f 8f 0c 00 f0 ff", "jnle 0x0000000010000012"},
};
// clang-format on

TEST(ArchRelocate, PositionIndependentIsCopiedVerbatim) {
  // Anywhere, even out of rel32 reach of the source.
  for (uint64_t to : {kUp, kDown, kFrom + 0x100000000}) {
    for (const Golden& g : kVerbatim) {
      expect_golden(g, kFrom, to);
      auto r = arch::relocate(unhex(g.in), kFrom, to);
      ASSERT_TRUE(r.ok());
      // Verbatim copies keep the source's instruction offsets.
      std::vector<uint32_t> offs;
      for (const auto& i : decode_run(unhex(g.in), kFrom))
        offs.push_back(static_cast<uint32_t>(i.address - kFrom));
      EXPECT_EQ(r->insn_offsets, offs) << g.name;
    }
  }
}

TEST(ArchRelocate, RipRelativeOperandsKeepTheirAddress) {
  for (const Golden& g : kRipUp) expect_golden(g, kFrom, kUp);
  for (const Golden& g : kRipDown) expect_golden(g, kFrom, kDown);
}

TEST(ArchRelocate, RelativeBranchesKeepTheirTarget) {
  for (const Golden& g : kBranchUp) expect_golden(g, kFrom, kUp);
  for (const Golden& g : kBranchDown) expect_golden(g, kFrom, kDown);
}

TEST(ArchRelocate, EveryJccRel8IsWidened) {
  for (const Golden& g : kJccUp) expect_golden(g, kFrom, kUp);
}

TEST(ArchRelocate, Rel8IsWidenedWhetherOrNotItWouldReach) {
  // Moved 1 GiB: no rel8 can reach back.
  expect_golden({"jmp rel8, 1 GiB away", "eb 10", "e9 0d 00 00 c0", "jmp 0x0000000010000012"},
                kFrom, kFrom + 0x40000000);
  expect_golden({"jz rel8, 1 GiB away", "74 10", "0f 84 0c 00 00 c0", "jz 0x0000000010000012"},
                kFrom, kFrom + 0x40000000);
  // Moved 4 bytes: rel8 would still reach, but lengths are fixed before placement.
  expect_golden({"jmp rel8, 4 bytes away", "eb 10", "e9 09 00 00 00", "jmp 0x0000000010000012"},
                kFrom, kFrom + 4);
  expect_golden({"jz rel8, 4 bytes away", "74 10", "0f 84 08 00 00 00", "jz 0x0000000010000012"},
                kFrom, kFrom + 4);
}

struct RunGolden {
  Golden g;
  std::vector<uint32_t> offsets;
};

TEST(ArchRelocate, BranchesWithinTheRunLandOnTheCopy) {
  // clang-format off
  const RunGolden cases[] = {
    {{"jz forward to the run's ret", "74 02 31 c0 c3", "0f 84 02 00 00 00 31 c0 c3",
      "jz 0x0000000010100008; xor eax, eax; ret"}, {0, 6, 8}},
    {{"jnz back to an earlier instruction", "31 c0 ff c0 75 fc", "31 c0 ff c0 0f 85 f8 ff ff ff",
      "xor eax, eax; inc eax; jnz 0x0000000010100002"}, {0, 2, 4}},
    {{"jmp to the next instruction", "eb 00 90", "e9 00 00 00 00 90",
      "jmp 0x0000000010100005; nop"}, {0, 5}},
    {{"two widened branches to the same ret", "75 02 eb 00 c3", "0f 85 05 00 00 00 e9 00 00 00 00 c3",
      "jnz 0x000000001010000B; jmp 0x000000001010000B; ret"}, {0, 6, 11}},
    {{"call to an instruction of the run", "e8 01 00 00 00 cc 58", "e8 01 00 00 00 cc 58",
      "call 0x0000000010100006; int3; pop rax"}, {0, 5, 6}},
    // Targets outside (from, end) keep their original address.
    {{"jmp to the end of the run", "eb 00", "e9 fd ff ef ff",
      "jmp 0x0000000010000002"}, {0}},
    {{"jmp back to the first instruction (the site)", "90 eb fd", "90 e9 fa ff ef ff",
      "nop; jmp 0x0000000010000000"}, {0, 1}},
    // endbr64 (verbatim), an outside jmp, a RIP-relative load, an inside jz, ret.
    {{"mixed run", "f3 0f 1e fa eb 10 48 8b 05 10 00 00 00 74 00 c3",
      "f3 0f 1e fa e9 0d 00 f0 ff 48 8b 05 0d 00 f0 ff 0f 84 00 00 00 00 c3",
      "endbr64; jmp 0x0000000010000016; mov rax, [0x000000001000001D]; jz 0x0000000010100016; ret"},
     {0, 4, 9, 16, 22}},
  };
  // clang-format on
  for (const RunGolden& c : cases) {
    expect_golden(c.g, kFrom, kUp);
    auto r = arch::relocate(unhex(c.g.in), kFrom, kUp);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->insn_offsets, c.offsets) << c.g.name;
  }
}

TEST(ArchRelocate, EmptyRun) {
  auto r = arch::relocate({}, kFrom, kUp);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->code.empty());
  EXPECT_TRUE(r->insn_offsets.empty());
}

struct Refusal {
  const char* name;
  const char* in;
  Errc code;
  std::vector<std::string> message_has;  // evidence the diagnostic must show
};

TEST(ArchRelocate, RefusesWhatItCannotProve) {
  // clang-format off
  const Refusal cases[] = {
    // b8 01 00 00 00  mov eax, 1 / eb fc  jmp 0x10000003 (inside the mov)
    {"jmp into the middle of an instruction", "b8 01 00 00 00 eb fc", Errc::not_instruction_boundary,
     {"jmp", "0x10000003", "0x10000005", "eb fc"}},
    {"jmp into its own bytes", "eb ff", Errc::not_instruction_boundary, {"jmp", "0x10000001"}},
    // 74 01  jz 0x10000003 / b8 01 00 00 00  mov eax, 1
    {"jz into the middle of a later instruction", "74 01 b8 01 00 00 00",
     Errc::not_instruction_boundary, {"jz", "0x10000003", "74 01"}},
    // Only a rel8 form exists: cannot be widened.
    {"loop",   "e2 fe",    Errc::unsupported, {"loop", "e2 fe"}},
    {"loope",  "e1 fe",    Errc::unsupported, {"loope", "e1 fe"}},
    {"loopne", "e0 fe",    Errc::unsupported, {"loopne", "e0 fe"}},
    {"jrcxz",  "e3 fe",    Errc::unsupported, {"jrcxz", "e3 fe"}},
    {"jecxz",  "67 e3 00", Errc::unsupported, {"jecxz", "67 e3 00"}},
    {"loop after a nop", "90 e2 fd", Errc::unsupported, {"loop", "0x10000001", "e2 fd"}},
    {"xbegin", "c7 f8 00 00 00 00", Errc::unsupported, {"xbegin", "c7 f8 00 00 00 00"}},
    // The run must end on an instruction boundary.
    {"cut mov [rip+x]", "48 8b 05 10 00", Errc::not_instruction_boundary, {"48 8b 05 10 00", "0x10000000"}},
    {"nop then cut jmp", "90 e9 00 00",   Errc::not_instruction_boundary, {"e9 00 00", "0x10000001"}},
    {"push then cut mov", "55 48",        Errc::not_instruction_boundary, {"48", "0x10000001"}},
  };
  // clang-format on
  for (const Refusal& c : cases) {
    SCOPED_TRACE(std::string(c.name) + ": " + c.in);
    auto r = arch::relocate(unhex(c.in), kFrom, kUp);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, c.code);
    for (const auto& s : c.message_has)
      EXPECT_NE(r.error().message.find(s), std::string::npos)
          << "'" << s << "' missing from: " << r.error().message;
  }
}

struct Edge {
  const char* name;
  const char* in;
  uint64_t to;
  const char* out;  // nullptr: must fail with out_of_range
};

TEST(ArchRelocate, ReachEndsExactlyAt2GiB) {
  // Source at B. The last destination that reaches succeeds with a displacement of
  // exactly INT32_MIN (80 00 00 00 le) or INT32_MAX (ff ff ff 7f); one byte further fails.
  constexpr uint64_t B = 0x555500000000;
  constexpr uint64_t G = 0x80000000;  // 2 GiB
  // clang-format off
  const Edge cases[] = {
    // e8 00 00 00 00  call B+5
    {"call rel32, up",         "e8 00 00 00 00", B + G,     "e8 00 00 00 80"},
    {"call rel32, up + 1",     "e8 00 00 00 00", B + G + 1, nullptr},
    {"call rel32, down",       "e8 00 00 00 00", B - G + 1, "e8 ff ff ff 7f"},
    {"call rel32, down - 1",   "e8 00 00 00 00", B - G,     nullptr},
    // 48 8b 05 00 00 00 00  mov rax, [B+7]
    {"load, up",               "48 8b 05 00 00 00 00", B + G,     "48 8b 05 00 00 00 80"},
    {"load, up + 1",           "48 8b 05 00 00 00 00", B + G + 1, nullptr},
    {"load, down",             "48 8b 05 00 00 00 00", B - G + 1, "48 8b 05 ff ff ff 7f"},
    {"load, down - 1",         "48 8b 05 00 00 00 00", B - G,     nullptr},
    // 48 81 3d 00 00 00 00 78 56 34 12  cmp qword ptr [B+11], 0x12345678
    {"cmp imm32, up",          "48 81 3d 00 00 00 00 78 56 34 12", B + G, "48 81 3d 00 00 00 80 78 56 34 12"},
    {"cmp imm32, up + 1",      "48 81 3d 00 00 00 00 78 56 34 12", B + G + 1, nullptr},
    {"cmp imm32, down",        "48 81 3d 00 00 00 00 78 56 34 12", B - G + 1, "48 81 3d ff ff ff 7f 78 56 34 12"},
    {"cmp imm32, down - 1",    "48 81 3d 00 00 00 00 78 56 34 12", B - G, nullptr},
    // c5 fd 6f 05 00 00 00 00  vmovdqa ymm0, [B+8]
    {"VEX load, up",           "c5 fd 6f 05 00 00 00 00", B + G,     "c5 fd 6f 05 00 00 00 80"},
    {"VEX load, up + 1",       "c5 fd 6f 05 00 00 00 00", B + G + 1, nullptr},
    // eb 00  jmp B+2, widened to 5 bytes
    {"jmp rel8, up",           "eb 00", B + G - 3, "e9 00 00 00 80"},
    {"jmp rel8, up + 1",       "eb 00", B + G - 2, nullptr},
    {"jmp rel8, down",         "eb 00", B - G - 2, "e9 ff ff ff 7f"},
    {"jmp rel8, down - 1",     "eb 00", B - G - 3, nullptr},
    // 74 00  jz B+2, widened to 6 bytes
    {"jz rel8, up",            "74 00", B + G - 4, "0f 84 00 00 00 80"},
    {"jz rel8, up + 1",        "74 00", B + G - 3, nullptr},
    {"jz rel8, down",          "74 00", B - G - 3, "0f 84 ff ff ff 7f"},
    {"jz rel8, down - 1",      "74 00", B - G - 4, nullptr},
  };
  // clang-format on
  for (const Edge& c : cases) {
    SCOPED_TRACE(std::string(c.name) + ": " + c.in + (c.out ? std::string("  ->  ") + c.out : ""));
    const auto in = unhex(c.in);
    auto r = arch::relocate(in, B, c.to);
    if (c.out) {
      ASSERT_TRUE(r.ok()) << r.error().message;
      EXPECT_EQ(hex(r->code), hex(unhex(c.out)));
      expect_same_effect(in, B, *r, c.to);
    } else {
      ASSERT_FALSE(r.ok()) << "relocated to " << hex(r->code);
      EXPECT_EQ(r.error().code, Errc::out_of_range);
      // Names the instruction (mnemonic, address, bytes) and the destination.
      const auto src = decode_run(in, B);
      ASSERT_EQ(src.size(), 1u);
      const std::string& m = r.error().message;
      EXPECT_NE(m.find(src[0].text()), std::string::npos) << m;
      EXPECT_NE(m.find("0x555500000000"), std::string::npos) << m;
      EXPECT_NE(m.find(hex(in)), std::string::npos) << m;
      char to[32];
      std::snprintf(to, sizeof to, "%#llx", static_cast<unsigned long long>(c.to));
      EXPECT_NE(m.find(to), std::string::npos) << m;
    }
  }
}

TEST(ArchRelocate, OutOfRangeNamesTheInstructionThatFailed) {
  // 90  nop / 48 8b 05 00 00 00 00  mov rax, [B+8]: the nop moves anywhere, the mov does not.
  constexpr uint64_t B = 0x555500000000;
  auto r = arch::relocate(unhex("90 48 8b 05 00 00 00 00"), B, B + 0x80000001);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::out_of_range);
  EXPECT_NE(r.error().message.find("mov rax, [0x0000555500000008]"), std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("at 0x555500000001"), std::string::npos) << r.error().message;
  // One byte closer, it fits.
  auto ok = arch::relocate(unhex("90 48 8b 05 00 00 00 00"), B, B + 0x80000000);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(hex(ok->code), "90 48 8b 05 00 00 00 80");  // nop; mov rax, [0x0000555500000008]
}

}  // namespace
