// The machine side of probes, without running any probe: how each instruction is
// planned (slot, emulation, refusal), emulation on registers, and goldens of the code
// generated for a slot and a detour (disassembly at a fixed address; hex beside it in
// the listing).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "arch/arch.hpp"
#include "arch/probe.hpp"
#include "common/hex.hpp"

namespace {

using namespace utramp;
using arch::Emulation;
using arch::OutOfLine;
using arch::PtRegs;

constexpr uint64_t kAt = 0x40001000;

std::vector<uint8_t> unhex(const std::string& s) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < s.size(); i += 3) out.push_back(static_cast<uint8_t>(std::stoul(s.substr(i, 2), nullptr, 16)));
  return out;
}

Result<OutOfLine> plan(const std::string& hex) { return arch::plan_out_of_line(unhex(hex), kAt); }

struct PlanCase {
  const char* bytes;
  const char* text;
  OutOfLine::Kind kind;
  Emulation::Kind emu;
};

TEST(ProbeArch, EachInstructionRunsFromTheSlotOrIsEmulated) {
  using K = OutOfLine::Kind;
  using E = Emulation::Kind;
  const PlanCase cases[] = {
      {"48 89 e5", "mov rbp, rsp", K::slot, E::jmp},
      {"48 8b 05 10 00 00 00", "mov rax, [0x0000000040001017]", K::slot, E::jmp},
      {"0f 05", "syscall", K::slot, E::jmp},
      {"f3 48 a5", "rep movsq", K::slot, E::jmp},
      {"9c", "pushfq", K::slot, E::jmp},
      {"eb 10", "jmp 0x0000000040001012", K::emulate, E::jmp},
      {"e9 00 01 00 00", "jmp 0x0000000040001105", K::emulate, E::jmp},
      {"74 05", "jz 0x0000000040001007", K::emulate, E::jcc},
      {"0f 8f 00 01 00 00", "jnle 0x0000000040001106", K::emulate, E::jcc},
      {"e2 fe", "loop 0x0000000040001000", K::emulate, E::loop},
      {"e1 fe", "loope 0x0000000040001000", K::emulate, E::loope},
      {"e0 fe", "loopne 0x0000000040001000", K::emulate, E::loopne},
      {"e3 02", "jrcxz 0x0000000040001004", K::emulate, E::jrcxz},
      {"e8 00 00 00 00", "call 0x0000000040001005", K::emulate, E::call},
      {"c3", "ret", K::emulate, E::ret},
      {"c2 08 00", "ret 0x08", K::emulate, E::ret},
      {"ff d0", "call rax", K::emulate, E::ind_call},
      {"ff 54 24 08", "call [rsp+0x08]", K::emulate, E::ind_call},
      {"ff 15 00 01 00 00", "call [0x0000000040001106]", K::emulate, E::ind_call},
      {"ff e0", "jmp rax", K::emulate, E::ind_jmp},
      {"3e ff e0", "notrack jmp rax", K::emulate, E::ind_jmp},
      {"ff 24 c5 00 10 00 00", "jmp [rax*8+0x1000]", K::emulate, E::ind_jmp},
      {"64 ff 14 25 28 00 00 00", "call fs:[0x0000000000000028]", K::emulate, E::ind_call},
  };
  for (const PlanCase& c : cases) {
    SCOPED_TRACE(c.bytes);
    auto p = plan(c.bytes);
    ASSERT_TRUE(p) << p.error().message;
    EXPECT_EQ(p->insn.text(), c.text);
    EXPECT_EQ(p->kind, c.kind);
    if (c.kind == K::emulate) {
      EXPECT_EQ(p->emu.kind, c.emu);
    }
  }
}

TEST(ProbeArch, InstructionsThatCannotRunOutOfLineAreRefusedWithTheReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"0f 0b", "it raises a trap itself"},                 // ud2
      {"cc", "it raises a trap itself"},                    // int3
      {"cd 80", "it raises a trap itself"},                 // int 0x80
      {"f4", "it raises a trap itself"},                    // hlt
      {"c7 f8 00 00 00 00", "transaction start"},           // xbegin
      {"ff 2c 24", "far control transfer"},                 // jmp far [rsp]
      {"65 ff 14 25 10 00 00 00", "gs-relative operand"},   // call gs:[0x10]
  };
  for (auto [bytes, why] : cases) {
    auto p = plan(bytes);
    ASSERT_FALSE(p) << bytes;
    EXPECT_EQ(p.error().code, Errc::unsupported) << bytes;
    EXPECT_NE(p.error().message.find(why), std::string::npos) << p.error().message;
    EXPECT_NE(p.error().message.find("40001000"), std::string::npos) << p.error().message;
  }
}

PtRegs regs_with(uint64_t rsp, uint64_t flags = 0x202) {
  PtRegs r{};
  r.rsp = rsp;
  r.eflags = flags;
  r.rip = kAt;
  return r;
}

TEST(ProbeArch, ConditionalBranchesFollowTheFlags) {
  // cc: 0 o, 1 no, 2 b, 3 ae, 4 e, 5 ne, 6 be, 7 a, 8 s, 9 ns, a p, b np, c l, d ge, e le, f g
  constexpr uint64_t CF = 0x1, PF = 0x4, ZF = 0x40, SF = 0x80, OF = 0x800;
  struct {
    uint64_t flags;
    uint16_t taken;  // bit cc set: taken with these flags
  } cases[] = {
      {0, 0b1010'1010'1010'1010 & ~0u},
      {CF, 0},
      {ZF, 0},
      {SF | OF, 0},
      {SF, 0},
      {PF, 0},
  };
  for (auto& c : cases) {
    const bool o = c.flags & OF, cf = c.flags & CF, z = c.flags & ZF, s = c.flags & SF, p = c.flags & PF;
    const bool want[16] = {o, !o, cf, !cf, z, !z, cf || z, !(cf || z), s, !s, p, !p, s != o, s == o,
                           z || s != o, !(z || s != o)};
    for (uint8_t cc = 0; cc < 16; ++cc) {
      Emulation e;
      e.kind = Emulation::Kind::jcc;
      e.cond = cc;
      e.target = 0x1234;
      e.next = kAt + 2;
      PtRegs r = regs_with(0x1000, c.flags | 0x202);
      arch::emulate(e, &r);
      EXPECT_EQ(r.rip, want[cc] ? 0x1234u : kAt + 2) << "cc " << int(cc) << " flags " << c.flags;
    }
  }
}

TEST(ProbeArch, EmulationOfLoopsCallsReturnsAndIndirectBranches) {
  alignas(16) uint64_t stack[16] = {};
  const uint64_t top = reinterpret_cast<uint64_t>(&stack[8]);
  // loop: rcx decremented, taken while non-zero.
  Emulation loop;
  loop.kind = Emulation::Kind::loop;
  loop.target = 0x100;
  loop.next = 0x200;
  PtRegs r = regs_with(top);
  r.rcx = 2;
  arch::emulate(loop, &r);
  EXPECT_EQ(r.rcx, 1u);
  EXPECT_EQ(r.rip, 0x100u);
  arch::emulate(loop, &r);
  EXPECT_EQ(r.rcx, 0u);
  EXPECT_EQ(r.rip, 0x200u);
  // jrcxz: no decrement.
  Emulation jr = loop;
  jr.kind = Emulation::Kind::jrcxz;
  arch::emulate(jr, &r);
  EXPECT_EQ(r.rip, 0x100u);
  // call: the next address pushed.
  Emulation call;
  call.kind = Emulation::Kind::call;
  call.target = 0x5000;
  call.next = kAt + 5;
  r = regs_with(top);
  arch::emulate(call, &r);
  EXPECT_EQ(r.rsp, top - 8);
  EXPECT_EQ(stack[7], kAt + 5);
  EXPECT_EQ(r.rip, 0x5000u);
  // ret 8: back, and 8 more bytes popped.
  Emulation ret;
  ret.kind = Emulation::Kind::ret;
  ret.ret_pop = 8;
  arch::emulate(ret, &r);
  EXPECT_EQ(r.rip, kAt + 5);
  EXPECT_EQ(r.rsp, top + 8);
  // call [rsp+8]: the operand read with rsp before the push.
  stack[9] = 0x7777;
  auto p = arch::plan_out_of_line(unhex("ff 54 24 08"), kAt);
  ASSERT_TRUE(p);
  r = regs_with(top);
  arch::emulate(p->emu, &r);
  EXPECT_EQ(r.rip, 0x7777u);
  EXPECT_EQ(r.rsp, top - 8);
  EXPECT_EQ(stack[7], kAt + 4);
  // jmp [rax+rcx*8]: base and scaled index.
  uint64_t table[4] = {0x10, 0x20, 0x30, 0x40};
  p = arch::plan_out_of_line(unhex("ff 24 c8"), kAt);
  ASSERT_TRUE(p);
  r = regs_with(top);
  r.rax = reinterpret_cast<uint64_t>(table);
  r.rcx = 2;
  arch::emulate(p->emu, &r);
  EXPECT_EQ(r.rip, 0x30u);
}

// Goldens: the slot and the detour at fixed addresses, as disassembly.
TEST(ProbeArch, SlotLayout) {
  // mov rax, [rip+0x10] at kAt, slot 1 MiB above: the operand names the same address.
  const auto insn = unhex("48 8b 05 10 00 00 00");
  auto s = arch::emit_slot(insn, kAt, kAt + 0x100000);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->post_entry, 12u);
  EXPECT_EQ(s->post_trap, 19u);
  EXPECT_EQ(arch::disassemble(s->code, kAt + 0x100000),
            "0x40101000: 48 8b 05 10 00 f0 ff           mov rax, [0x0000000040001017]\n"
            "0x40101007: e9 fb ff ef ff                 jmp 0x0000000040001007\n"
            "0x4010100c: 48 8b 05 04 00 f0 ff           mov rax, [0x0000000040001017]\n"
            "0x40101013: cc                             int3\n"
            "0x40101014: e9 ee ff ef ff                 jmp 0x0000000040001007\n");
}

TEST(ProbeArch, JumpWindowsAndTheirRefusals) {
  // push rbx (1) + call (5): the call is last, the detour pushes its return address.
  auto w = arch::plan_jump_window(unhex("53 e8 00 01 00 00 90"), kAt);
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ(w->len, 6u);
  EXPECT_TRUE(w->ends_in_call);
  EXPECT_EQ(w->call_target, kAt + 6 + 0x100);
  // A call inside the 5 bytes would return into them.
  auto c = arch::plan_jump_window(unhex("e8 00 01 00 00 90"), kAt - 0);
  ASSERT_TRUE(c);  // a 5-byte call alone is the whole window
  auto bad = arch::plan_jump_window(unhex("e8 00 01 00 00"), kAt);
  ASSERT_TRUE(bad);
  auto mid = arch::plan_jump_window(unhex("90 0f 05 90 90 90"), kAt);
  ASSERT_FALSE(mid);
  EXPECT_NE(mid.error().message.find("cannot run from a detour"), std::string::npos) << mid.error().message;
  auto icall = arch::plan_jump_window(unhex("ff d0 90 90 90"), kAt);
  ASSERT_FALSE(icall);
  EXPECT_NE(icall.error().message.find("indirect call"), std::string::npos);
  auto shortfn = arch::plan_jump_window(unhex("90 c3"), kAt);
  ASSERT_FALSE(shortfn);
  EXPECT_EQ(shortfn.error().code, Errc::too_small);
}

TEST(ProbeArch, DetourLayout) {
  // A window of one 6-byte instruction (imul eax, edi, 12345), detour 1 MiB above.
  auto w = arch::plan_jump_window(unhex("69 c7 39 30 00 00 83 c0 07 c3"), kAt);
  ASSERT_TRUE(w);
  arch::DetourSpec spec;
  spec.addr = kAt;
  spec.window = *w;
  spec.site = 0x1111222233334444;
  spec.dispatch = kAt + 0x200000;
  spec.redirect_trap = 0x7f0000001000;
  auto d = arch::emit_detour(spec, kAt + 0x100000);
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_LE(d->size(), arch::detour_size_bound(spec));
  const std::string text = arch::disassemble(*d, kAt + 0x100000);
  // The frame: the red zone skipped first, flags saved before anything changes them.
  EXPECT_EQ(text.substr(0, text.find('\n', text.find("pushfq"))),
            "0x40101000: 48 8d 64 24 80                 lea rsp, [rsp-0x80]\n"
            "0x40101005: 50                             push rax\n"
            "0x40101006: 9c                             pushfq");
  for (const char* want :
       {"mov rdi, 0x1111222233334444", "call 0x0000000040201000", "popfq", "pop rsp",
        "imul eax, edi, 0x3039", "jmp 0x0000000040001006", "jmp [0x"})
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  // Nothing between `popfq` and the relocated instruction changes the flags.
  const auto popf = text.find("popfq"), imul = text.find("imul");
  EXPECT_EQ(text.substr(popf, imul - popf).find("lea rsp"), std::string::npos);
}

TEST(ProbeArch, ExtendedStateUseIsRecognised) {
  const std::pair<const char*, bool> cases[] = {
      {"48 01 d8", false},           // add rax, rbx
      {"f0 48 ff 07", false},        // lock inc qword [rdi]
      {"66 0f ef c0", true},         // pxor xmm0, xmm0
      {"c5 f8 77", true},            // vzeroupper
      {"d9 ee", true},               // fldz
      {"0f ae 17", true},            // ldmxcsr [rdi]
      {"62 f1 7c 48 28 c1", true},   // vmovaps zmm0, zmm1
      {"c5 f8 90 c1", true},         // kmovw k0, k1
      {"f3 0f 10 07", true},         // movss xmm0, [rdi]
  };
  for (auto [bytes, want] : cases)
    EXPECT_EQ(arch::insn_touches_extended_state(unhex(bytes), kAt), want) << bytes;
}

}  // namespace
