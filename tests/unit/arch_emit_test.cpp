// Emission goldens: the 5-byte site instructions, jumps that reach anywhere, the counting
// stub, the rel32 reach arithmetic, and trap-context access. Each golden is the bytes
// with the disassembly asserted beside them.
#include <gtest/gtest.h>
#include <ucontext.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "arch/arch.hpp"
#include "arch_test_util.hpp"

using namespace utramp;
using arch::Flow;
using arch::test::decode_run;
using arch::test::hex;
using arch::test::listing;
using arch::test::unhex;

namespace {

constexpr uint64_t kAt = 0x401000;
constexpr uint64_t B = 0x555500000000;
constexpr uint64_t G = 0x80000000;  // 2 GiB

std::string addr(uint64_t a) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%#llx", static_cast<unsigned long long>(a));
  return buf;
}

TEST(ArchEmit, SiteConstants) {
  EXPECT_EQ(hex(arch::kNop5), "0f 1f 44 00 00");  // nop [rax+rax*1], eax
  EXPECT_EQ(listing(arch::kNop5, kAt), "nop [rax+rax*1], eax");
  EXPECT_EQ(hex(arch::kJmpShort4), "eb 04");  // jmp +4
  EXPECT_EQ(listing(arch::kJmpShort4, kAt), "jmp 0x0000000000401006");
  EXPECT_EQ(arch::kTrapByte, 0xcc);
  EXPECT_EQ(listing(std::vector<uint8_t>{arch::kTrapByte}, kAt), "int3");
  EXPECT_EQ(arch::trap_address_from_ip(kAt + arch::kTrapLen), kAt);
}

struct SiteGolden {
  const char* name;
  uint64_t at;
  uint64_t target;
  const char* call;  // bytes of encode_call(at, target)
  const char* jmp;   // bytes of encode_jmp(at, target)
  const char* text;  // target as Zydis prints it
};

TEST(ArchEmit, CallAndJmpGoldens) {
  // clang-format off
  const SiteGolden cases[] = {
    {"forward",              kAt, 0x402000,      "e8 fb 0f 00 00", "e9 fb 0f 00 00", "0x0000000000402000"},
    {"backward",             kAt, 0x400000,      "e8 fb ef ff ff", "e9 fb ef ff ff", "0x0000000000400000"},
    {"next instruction",     kAt, kAt + 5,       "e8 00 00 00 00", "e9 00 00 00 00", "0x0000000000401005"},
    {"itself",               kAt, kAt,           "e8 fb ff ff ff", "e9 fb ff ff ff", "0x0000000000401000"},
    // Within rel8 reach, still the 5-byte form: a site is always 5 bytes.
    {"2 bytes ahead",        kAt, kAt + 2,       "e8 fd ff ff ff", "e9 fd ff ff ff", "0x0000000000401002"},
    {"rel 0x7f",             kAt, kAt + 0x84,    "e8 7f 00 00 00", "e9 7f 00 00 00", "0x0000000000401084"},
    {"rel -0x80",            kAt, kAt - 0x7b,    "e8 80 ff ff ff", "e9 80 ff ff ff", "0x0000000000400F85"},
    // The last reachable bytes: rel32 = INT32_MAX and INT32_MIN.
    {"+2 GiB edge",          B,   B + 5 + G - 1, "e8 ff ff ff 7f", "e9 ff ff ff 7f", "0x0000555580000004"},
    {"-2 GiB edge",          B,   B + 5 - G,     "e8 00 00 00 80", "e9 00 00 00 80", "0x0000555480000005"},
  };
  // clang-format on
  for (const SiteGolden& c : cases) {
    SCOPED_TRACE(c.name);
    auto call = arch::encode_call(c.at, c.target);
    auto jmp = arch::encode_jmp(c.at, c.target);
    ASSERT_TRUE(call.ok()) << call.error().message;
    ASSERT_TRUE(jmp.ok()) << jmp.error().message;
    EXPECT_EQ(hex(*call), c.call);
    EXPECT_EQ(hex(*jmp), c.jmp);
    EXPECT_EQ(listing(*call, c.at), std::string("call ") + c.text);
    EXPECT_EQ(listing(*jmp, c.at), std::string("jmp ") + c.text);
    const auto dc = decode_run(*call, c.at);
    const auto dj = decode_run(*jmp, c.at);
    ASSERT_EQ(dc.size(), 1u);
    ASSERT_EQ(dj.size(), 1u);
    EXPECT_EQ(dc[0].flow, Flow::call);
    EXPECT_EQ(dj[0].flow, Flow::jump);
    EXPECT_EQ(dc[0].target, c.target);
    EXPECT_EQ(dj[0].target, c.target);
  }
}

TEST(ArchEmit, CallAndJmpBeyondReachAreRefused) {
  for (uint64_t target : {B + 5 + G, B + 5 - G - 1, uint64_t{0x7fff00000000}, uint64_t{0x1000}}) {
    SCOPED_TRACE(addr(target));
    auto call = arch::encode_call(B, target);
    auto jmp = arch::encode_jmp(B, target);
    ASSERT_FALSE(call.ok());
    ASSERT_FALSE(jmp.ok());
    EXPECT_EQ(call.error().code, Errc::out_of_range);
    EXPECT_EQ(jmp.error().code, Errc::out_of_range);
    for (const auto* e : {&call.error(), &jmp.error()}) {
      EXPECT_NE(e->message.find(addr(B)), std::string::npos) << e->message;
      EXPECT_NE(e->message.find(addr(target)), std::string::npos) << e->message;
    }
    EXPECT_NE(call.error().message.find("call"), std::string::npos);
    EXPECT_NE(jmp.error().message.find("jmp"), std::string::npos);
  }
}

struct AnywhereGolden {
  const char* name;
  uint64_t at;
  uint64_t target;
  const char* bytes;
  const char* text;  // disassembly of the first instruction
};

TEST(ArchEmit, JumpAnywhere) {
  // clang-format off
  const AnywhereGolden cases[] = {
    // Reachable: the 5-byte jmp rel32.
    {"near",            B, B + 0x1000,     "e9 fb 0f 00 00",   "jmp 0x0000555500001000"},
    {"+2 GiB edge",     B, B + 5 + G - 1,  "e9 ff ff ff 7f",   "jmp 0x0000555580000004"},
    {"-2 GiB edge",     B, B + 5 - G,      "e9 00 00 00 80",   "jmp 0x0000555480000005"},
    // One byte further: jmp [rip+0] with the 8-byte target right behind it.
    {"+2 GiB + 1",      B, B + 5 + G,      "ff 25 00 00 00 00 05 00 00 80 55 55 00 00", "jmp [0x0000555500000006]"},
    {"-2 GiB - 1",      B, B + 5 - G - 1,  "ff 25 00 00 00 00 04 00 00 80 54 55 00 00", "jmp [0x0000555500000006]"},
    {"far up",          kAt, 0x7fff12345678, "ff 25 00 00 00 00 78 56 34 12 ff 7f 00 00", "jmp [0x0000000000401006]"},
    {"far down",        B, 0x1000,         "ff 25 00 00 00 00 00 10 00 00 00 00 00 00", "jmp [0x0000555500000006]"},
  };
  // clang-format on
  for (const AnywhereGolden& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = arch::encode_jump_anywhere(c.at, c.target);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(hex(*r), c.bytes);
    auto first = arch::decode(r->data(), r->size(), c.at);
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(first->text(), c.text);
    if (r->size() == arch::kSiteLen) {
      // The rel32 form is exactly what encode_jmp gives.
      auto j = arch::encode_jmp(c.at, c.target);
      ASSERT_TRUE(j.ok());
      EXPECT_EQ(hex(*r), hex(*j));
      EXPECT_EQ(first->flow, Flow::jump);
      EXPECT_EQ(first->target, c.target);
    } else {
      // jmp [rip+0]: reads its target from the 8 bytes that follow it.
      ASSERT_EQ(r->size(), 6u + 8u);
      EXPECT_EQ(first->length, 6);
      EXPECT_EQ(first->flow, Flow::indirect_jump);
      EXPECT_TRUE(first->rip_relative);
      EXPECT_EQ(first->target, c.at + 6);
      uint64_t slot;
      std::memcpy(&slot, r->data() + 6, sizeof slot);
      EXPECT_EQ(slot, c.target);
    }
  }
}

// Checks a counting stub against the layout documented above emit_counting_stub: one
// locked increment of the 64-bit counter, through RIP when it reaches and through a
// saved rax otherwise, then ret.
void expect_counting_stub(const std::vector<uint8_t>& code, uint64_t base, uint64_t counter) {
  const auto insns = decode_run(code, base);
  ASSERT_FALSE(insns.empty());
  EXPECT_EQ(insns.back().text(), "ret");
  EXPECT_EQ(insns.back().flow, Flow::ret);
  for (size_t i = 0; i + 1 < insns.size(); ++i) EXPECT_EQ(insns[i].flow, Flow::none);
  if (insns.size() == 2) {
    // f0 48 ff 05 disp32: lock inc qword ptr [rip+disp32]
    EXPECT_EQ(hex(insns[0].raw().first(4)), "f0 48 ff 05");
    EXPECT_TRUE(insns[0].rip_relative);
    EXPECT_EQ(insns[0].target, counter);
  } else {
    ASSERT_EQ(insns.size(), 5u);
    char mov[64];
    std::snprintf(mov, sizeof mov, "mov rax, 0x%llX", static_cast<unsigned long long>(counter));
    EXPECT_EQ(insns[0].text(), "push rax");
    EXPECT_EQ(insns[1].text(), mov);
    EXPECT_EQ(hex(insns[2].raw()), "f0 48 ff 00");  // lock inc qword ptr [rax]
    EXPECT_EQ(insns[3].text(), "pop rax");
  }
}

struct StubGolden {
  const char* name;
  uint64_t base;
  uint64_t counter;
  const char* bytes;
  const char* listing;
};

TEST(ArchEmit, CountingStubGoldens) {
  // clang-format off
  const StubGolden cases[] = {
    {"counter in reach",            B + 0x1000, B + 0x2000,
     "f0 48 ff 05 f8 0f 00 00 c3",
     "lock inc [0x0000555500002000]; ret"},
    {"counter below, in reach",     B + 0x1000, B - 0x10000,
     "f0 48 ff 05 f8 ef fe ff c3",
     "lock inc [0x00005554FFFF0000]; ret"},
    {"counter out of reach, high",  B + 0x1000, 0x7fff00000000,
     "50 48 b8 00 00 00 00 ff 7f 00 00 f0 48 ff 00 58 c3",
     "push rax; mov rax, 0x7FFF00000000; lock inc [rax]; pop rax; ret"},
    {"counter out of reach, low",   B + 0x1000, 0x601000,
     "50 48 c7 c0 00 10 60 00 f0 48 ff 00 58 c3",
     "push rax; mov rax, 0x601000; lock inc [rax]; pop rax; ret"},
  };
  // clang-format on
  for (const StubGolden& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = arch::emit_counting_stub(c.base, c.counter);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(hex(*r), c.bytes);
    EXPECT_EQ(listing(*r, c.base), c.listing);
    expect_counting_stub(*r, c.base, c.counter);
  }
}

TEST(ArchEmit, CountingStubNamesTheCounterAcrossTheReachEdge) {
  // Whichever form is chosen near the ±2 GiB edge, the increment must hit the counter.
  constexpr uint64_t base = B;
  for (int64_t d : {-int64_t{G} - 16, -int64_t{G} - 1, -int64_t{G}, -int64_t{G} + 8,
                    -int64_t{G} + 16, int64_t{G} - 16, int64_t{G} - 1, int64_t{G},
                    int64_t{G} + 7, int64_t{G} + 8, int64_t{G} + 16}) {
    const uint64_t counter = base + static_cast<uint64_t>(d);
    SCOPED_TRACE(addr(counter));
    auto r = arch::emit_counting_stub(base, counter);
    ASSERT_TRUE(r.ok()) << r.error().message;
    expect_counting_stub(*r, base, counter);
  }
}

TEST(ArchEmit, Rel32Reaches) {
  constexpr uint64_t N = B;  // the next instruction's address
  EXPECT_TRUE(arch::rel32_reaches(N, N));
  EXPECT_TRUE(arch::rel32_reaches(N, N + G - 1));   // rel32 = INT32_MAX
  EXPECT_FALSE(arch::rel32_reaches(N, N + G));
  EXPECT_TRUE(arch::rel32_reaches(N, N - G));       // rel32 = INT32_MIN
  EXPECT_FALSE(arch::rel32_reaches(N, N - G - 1));
  EXPECT_TRUE(arch::rel32_reaches(0, G - 1));
  EXPECT_FALSE(arch::rel32_reaches(0, G));
  EXPECT_TRUE(arch::rel32_reaches(G, 0));
  EXPECT_FALSE(arch::rel32_reaches(G + 1, 0));
  // Far apart in either direction, not near a 32-bit wrap.
  EXPECT_FALSE(arch::rel32_reaches(0x400000, 0x7fff00000000));
  EXPECT_FALSE(arch::rel32_reaches(0x7fff00000000, 0x400000));
  EXPECT_FALSE(arch::rel32_reaches(N, N + (uint64_t{1} << 32)));
}

TEST(ArchEmit, Rel32Window) {
  constexpr uint64_t kMiB = 0x100000;
  constexpr uint64_t kReach = G - kMiB;  // a 1 MiB margin inside ±2 GiB
  constexpr uint64_t kUserBottom = 0x10000;
  constexpr uint64_t kUserTop = uint64_t{1} << 47;
  struct Case {
    uint64_t addr, lo, hi;
  };
  const Case cases[] = {
      {B, 0x555480100000, 0x55557ff00000},
      {0x400000, kUserBottom, 0x400000 + kReach},                    // clamped below
      {0x7fffff000000, 0x7fffff000000 - kReach, kUserTop},           // clamped above
      {kUserBottom + kReach, kUserBottom, kUserBottom + 2 * kReach},  // exactly at the clamp
      {kUserBottom + kReach + 1, kUserBottom + 1, kUserBottom + 2 * kReach + 1},
      {kUserTop - kReach, kUserTop - 2 * kReach, kUserTop},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(addr(c.addr));
    const auto w = arch::rel32_window(c.addr);
    EXPECT_EQ(w.lo, c.lo);
    EXPECT_EQ(w.hi, c.hi);
    EXPECT_LE(w.lo, c.addr);
    EXPECT_GT(w.hi, c.addr);
    // A 1 MiB block at either end of the window: the site reaches every byte of it with
    // a 5-byte call, and a rel32 at any point of the block reaches the site back.
    for (uint64_t block : {w.lo, w.hi - kMiB}) {
      for (uint64_t x : {block, block + kMiB - 1}) {
        EXPECT_TRUE(arch::rel32_reaches(c.addr + arch::kSiteLen, x)) << addr(x);
        EXPECT_TRUE(arch::rel32_reaches(x, c.addr)) << addr(x);
        EXPECT_TRUE(arch::rel32_reaches(x + arch::kMaxInsnLen, c.addr)) << addr(x);
      }
    }
  }
}

TEST(ArchContext, ZeroedUcontext) {
  ucontext_t uc;
  std::memset(&uc, 0, sizeof uc);
  EXPECT_EQ(arch::ctx_ip(&uc), 0u);
  EXPECT_EQ(arch::ctx_sp(&uc), 0u);

  arch::ctx_set_ip(&uc, 0x401234);
  EXPECT_EQ(arch::ctx_ip(&uc), 0x401234u);
  EXPECT_EQ(static_cast<uint64_t>(uc.uc_mcontext.gregs[REG_RIP]), 0x401234u);
  EXPECT_EQ(arch::ctx_sp(&uc), 0u);

  arch::ctx_set_sp(&uc, 0x7ffc00001000);
  EXPECT_EQ(arch::ctx_sp(&uc), 0x7ffc00001000u);
  EXPECT_EQ(static_cast<uint64_t>(uc.uc_mcontext.gregs[REG_RSP]), 0x7ffc00001000u);
  EXPECT_EQ(arch::ctx_ip(&uc), 0x401234u);

  // Nothing else in the context was touched.
  for (int r = 0; r < NGREG; ++r) {
    if (r != REG_RIP && r != REG_RSP) {
      EXPECT_EQ(uc.uc_mcontext.gregs[r], 0) << "greg " << r;
    }
  }

  // Reads reflect what the kernel would have stored.
  uc.uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(0x555500000011);
  EXPECT_EQ(arch::ctx_ip(&uc), 0x555500000011u);
  EXPECT_EQ(arch::trap_address_from_ip(arch::ctx_ip(&uc)), 0x555500000010u);
}

}  // namespace
