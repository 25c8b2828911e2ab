// The JIT's fusions in proven code (src/arch/x86_64/bpf_jit.cpp, "Fusions"): each
// program runs on the interpreter (the reference) and on the JIT with the verifier's
// proof, which must both give the value worked out by hand. Each case is one a wrong
// fusion gets wrong: a jump into a group or onto the access after it, an address
// register still read after the access, the stored value being the address, constants
// that add up beyond a displacement, 64- against 32-bit wraparound, registers a
// division or a shift may or may not clobber, loop heads that follow a group; and the
// strength reduction of induction products and the decomposed remainder ("Strength
// reduction", "Remainders"): loops and sequences it must and must not rewrite.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "ebpf/asm.hpp"
#include "ebpf/engine.hpp"

namespace {

using namespace utramp;
using namespace utramp::ebpf;

class JitFusion : public ::testing::TestWithParam<EngineKind> {
 protected:
  // Verified (the proof is what enables the fusions), with an 8-byte context.
  uint64_t run(std::string_view text, uint64_t ctx_value = 0) {
    auto p = assemble(text);
    EXPECT_TRUE(p) << p.error().message;
    if (!p) return ~uint64_t(0);
    ExecOptions o;
    o.ctx_size = 8;
    auto e = load(Program{"fusion", "", std::move(*p)}, o, GetParam());
    EXPECT_TRUE(e) << e.error().message;
    if (!e) return ~uint64_t(0);
    uint64_t ctx = ctx_value;
    auto r = (*e)->execute(&ctx, sizeof ctx);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : ~uint64_t(0);
  }
};

TEST_P(JitFusion, JumpOntoTheInstructionAfterAGroup) {
  // Insn 7 is a target: the group is 5-6 alone, and the load at 8 reads r5, which the
  // path from 4 set differently (a fused 5-8 would skip 7 or fold the wrong address).
  constexpr const char* kProg = R"(
    ldxdw %r1, [%r1+0]
    stdw [%r10-8], 5
    stdw [%r10-16], 7
    mov %r5, %r10
    jne %r1, 0, +2
    mov %r5, %r10
    add %r5, -8
    add %r5, -8
    ldxdw %r0, [%r5+0]
    exit
  )";
  EXPECT_EQ(run(kProg, 1), 5u);
  EXPECT_EQ(run(kProg, 0), 7u);
}

TEST_P(JitFusion, JumpOntoTheAccessAfterAGroup) {
  // The load is a target: it must go through r5 whichever path set it.
  constexpr const char* kProg = R"(
    ldxdw %r1, [%r1+0]
    stdw [%r10-8], 5
    stdw [%r10-16], 7
    mov %r5, %r10
    add %r5, -8
    jne %r1, 0, +2
    mov %r5, %r10
    add %r5, -16
    ldxdw %r0, [%r5+0]
    exit
  )";
  EXPECT_EQ(run(kProg, 1), 5u);
  EXPECT_EQ(run(kProg, 0), 7u);
}

TEST_P(JitFusion, AddressStillReadAfterTheAccess) {
  // r5 = fp-16 (sub: no group); the group's r5 is read again by the load after the
  // store: the store must not be folded, r5 must become fp-8.
  EXPECT_EQ(run(R"(
    stdw [%r10-8], 1
    stdw [%r10-16], 2
    mov %r5, %r10
    sub %r5, 16
    ldxdw %r6, [%r5+0]
    mov %r5, %r10
    add %r5, -8
    stdw [%r5+0], 40
    ldxdw %r0, [%r5+0]
    add %r0, %r6
    exit
  )"),
            42u);
}

TEST_P(JitFusion, StoredValueIsTheAddress) {
  // stxdw [r5+8], r5 spills the pointer itself: r5 must be computed first (it held
  // fp-24 before, set by a sub: no group).
  EXPECT_EQ(run(R"(
    stdw [%r10-24], 3
    stdw [%r10-16], 9
    mov %r5, %r10
    sub %r5, 24
    ldxdw %r6, [%r5+0]
    mov %r5, %r10
    add %r5, -16
    stxdw [%r5+8], %r5
    ldxdw %r1, [%r10-8]
    ldxdw %r0, [%r1+0]
    add %r0, %r6
    exit
  )"),
            12u);
}

TEST_P(JitFusion, LoadIntoTheAddressRegister) {
  // ldxdw r5, [r5+0]: r5 is written by the access, so folding is right even though r5
  // is read after it.
  EXPECT_EQ(run(R"(
    stdw [%r10-16], 33
    mov %r5, %r10
    add %r5, -8
    add %r5, -8
    ldxdw %r5, [%r5+0]
    mov %r0, %r5
    add %r0, 1
    exit
  )"),
            34u);
}

TEST_P(JitFusion, ConstantsBeyondADisplacement) {
  // 0x7fffffff twice is past a 32-bit displacement: the group stops before the second.
  EXPECT_EQ(run(R"(
    mov %r3, 5
    mov %r4, %r3
    add %r4, 0x7fffffff
    add %r4, 0x7fffffff
    mov %r0, %r4
    exit
  )"),
            5u + 2 * 0x7fffffffull);
  // A negative sum and a register: r4 = r3 + r2 - 0x80000000 (exactly INT32_MIN fits).
  EXPECT_EQ(run(R"(
    lddw %r3, 0x100000000
    mov %r2, 7
    mov %r4, %r3
    add %r4, -0x40000000
    add %r4, %r2
    add %r4, -0x40000000
    mov %r0, %r4
    exit
  )"),
            0x100000000ull + 7 - 0x80000000ull);
}

TEST_P(JitFusion, WraparoundIs64BitInAGroupAnd32BitOutside) {
  // lea wraps at 64 bits as add does; add32 is not part of a group.
  EXPECT_EQ(run(R"(
    lddw %r3, 0xffffffffffffffff
    mov %r4, %r3
    add %r4, 1
    mov %r0, %r4
    exit
  )"),
            0u);
  EXPECT_EQ(run(R"(
    mov %r3, 0
    mov %r4, %r3
    add %r4, -1
    mov %r0, %r4
    exit
  )"),
            ~uint64_t(0));
  EXPECT_EQ(run(R"(
    lddw %r3, 0x1ffffffff
    mov %r4, %r3
    add32 %r4, 1
    mov %r0, %r4
    exit
  )"),
            0u);
  // A group's register added to itself stops it: r4 = (r3 + 3) * 2.
  EXPECT_EQ(run(R"(
    mov %r3, 4
    mov %r4, %r3
    add %r4, 3
    add %r4, %r4
    mov %r0, %r4
    exit
  )"),
            14u);
}

TEST_P(JitFusion, DivisionKeepsOnlyLiveRegisters) {
  // div uses rax and rdx (r0 and r3): kept when read later, not when dead.
  EXPECT_EQ(run(R"(
    mov %r0, 5
    mov %r3, 9
    mov %r1, 100
    mov %r2, 7
    div %r1, %r2
    add %r1, %r0
    add %r1, %r3
    mov %r0, %r1
    exit
  )"),
            14u + 5 + 9);
  EXPECT_EQ(run(R"(
    mov %r0, 5
    mov %r3, 9
    mov %r1, 100
    mov %r2, 7
    mod %r1, %r2
    mov %r0, %r1
    exit
  )"),
            2u);
  // r3 is DST, r0 live: 100 / 7 into rdx, rax back.
  EXPECT_EQ(run(R"(
    mov %r0, 1000
    mov %r3, 100
    mov %r2, 7
    div %r3, %r2
    add %r0, %r3
    exit
  )"),
            1014u);
  // 32-bit: the quotient of the low halves, zero-extended.
  EXPECT_EQ(run(R"(
    lddw %r1, 0x500000064
    mov %r2, 7
    div32 %r1, %r2
    mov %r0, %r1
    exit
  )"),
            14u);
}

TEST_P(JitFusion, ShiftKeepsOnlyALiveCount) {
  // A count register other than r4 goes through rcx (r4): kept when read later.
  EXPECT_EQ(run(R"(
    mov %r4, 7
    mov %r2, 3
    mov %r0, 1
    lsh %r0, %r2
    add %r0, %r4
    exit
  )"),
            15u);
  EXPECT_EQ(run(R"(
    mov %r4, 7
    mov %r2, 5
    mov %r0, 1
    lsh %r0, %r2
    mov %r4, 0
    add %r0, %r4
    exit
  )"),
            32u);
  // 32-bit counts are masked by 31, 64-bit by 63; arsh keeps the sign.
  EXPECT_EQ(run(R"(
    mov %r2, 33
    mov %r0, 1
    lsh32 %r0, %r2
    exit
  )"),
            2u);
  EXPECT_EQ(run(R"(
    mov %r2, 65
    mov %r0, -8
    arsh %r0, %r2
    exit
  )"),
            static_cast<uint64_t>(-4));
}

TEST_P(JitFusion, BackEdgeOntoTheAccessAfterAGroup) {
  // The loop head is the load right after a group computed once before the loop.
  EXPECT_EQ(run(R"(
    stdw [%r10-8], 3
    mov %r0, 0
    mov %r3, 0
    mov %r5, %r10
    add %r5, -8
  l:
    ldxdw %r4, [%r5+0]
    add %r0, %r4
    add %r3, 1
    jlt %r3, 4, l
    exit
  )"),
            12u);
}

TEST_P(JitFusion, FnvOverTheStack) {
  // bench_ebpf_engines' fnv: folded stores and loads with an index register.
  const uint64_t seed = 0x9e3779b97f4a7c15ull;
  uint8_t buf[256];
  for (uint64_t i = 0; i < 256; i++) buf[i] = static_cast<uint8_t>(((i + 1) * seed) >> 8);
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : buf) h = (h ^ b) * 0x100000001b3ull;
  EXPECT_EQ(run(R"(
    ldxdw %r2, [%r1+0]
    mov %r3, 0
  fill:
    mov %r4, %r3
    add %r4, 1
    mul %r4, %r2
    rsh %r4, 8
    mov %r5, %r10
    add %r5, -256
    add %r5, %r3
    stxb [%r5+0], %r4
    add %r3, 1
    jlt %r3, 256, fill
    lddw %r0, 0xcbf29ce484222325
    lddw %r6, 0x100000001b3
    mov %r3, 0
  hash:
    mov %r5, %r10
    add %r5, -256
    add %r5, %r3
    ldxb %r4, [%r5+0]
    xor %r0, %r4
    mul %r0, %r6
    add %r3, 1
    jlt %r3, 256, hash
    exit
  )",
                seed),
            h);
}

// Strength reduction of (I + K) * R in a loop (bpf_jit.cpp): steps of I other than 1,
// an R that is a register or a constant whose step overflows 32 bits, counting down,
// the product and I read after the loop, wraparound. `sum` is the loop in C.
TEST_P(JitFusion, InductionProductStepsAndConstants) {
  const uint64_t seed = 0xfedcba9876543211ull;
  uint64_t sum = 0;
  for (uint64_t i = 5; i < 100; i += 4) sum += (i + 3) * seed;
  EXPECT_EQ(run(R"(
    ldxdw %r2, [%r1+0]
    mov %r0, 0
    mov %r3, 5
  l:
    mov %r4, %r3
    add %r4, 3
    mul %r4, %r2
    add %r0, %r4
    add %r3, 4
    jlt %r3, 100, l
    exit
  )",
                seed),
            sum);
  // R a constant, C * R beyond 32 bits; no K.
  uint64_t x = 0;
  for (uint64_t i = 7; i < 300; i += 3) x = (x ^ i * 0x7fffffffull) * 3;
  EXPECT_EQ(run(R"(
    mov %r0, 0
    mov %r3, 7
  l:
    mov %r4, %r3
    mul %r4, 0x7fffffff
    xor %r0, %r4
    mul %r0, 3
    add %r3, 3
    jlt %r3, 300, l
    exit
  )"),
            x);
  // A negative constant R, K negative.
  x = 0;
  for (uint64_t i = 0; i < 40; ++i) x += (i - 9) * static_cast<uint64_t>(-7);
  EXPECT_EQ(run(R"(
    mov %r0, 0
    mov %r3, 0
  l:
    mov %r4, %r3
    add %r4, -9
    mul %r4, -7
    add %r0, %r4
    add %r3, 1
    jlt %r3, 40, l
    exit
  )"),
            x);
}

TEST_P(JitFusion, InductionProductCountingDownAndReadAfter) {
  // C = -1 (sub R from the product); I read after its step in the loop; the product
  // (T) and I read after the loop.
  const uint64_t seed = 0x8000000000000003ull;
  uint64_t acc = 0, t = 0, i = 50;
  do {
    t = (i - 1) * seed;
    i -= 1;
    acc = (acc ^ t) + i;
  } while (i != 0);
  EXPECT_EQ(run(R"(
    ldxdw %r2, [%r1+0]
    mov %r0, 0
    mov %r3, 50
  l:
    mov %r4, %r3
    add %r4, -1
    mul %r4, %r2
    add %r3, -1
    xor %r0, %r4
    add %r0, %r3
    jne %r3, 0, l
    add %r0, %r4
    add %r0, %r3
    exit
  )",
                seed),
            acc + t + i);
}

TEST_P(JitFusion, InductionProductNotReduced) {
  // Loops the reduction must leave alone (the code is then the plain one): R written
  // in the loop (by an ALU operation, by an lddw); I stepped twice; a second way into the loop head (a forward jump that
  // would skip the product's set-up); a 32-bit multiply.
  const uint64_t seed = 0x123456789abcdefull;
  uint64_t r = seed, x = 0;
  for (uint64_t i = 0; i < 20; ++i) {
    x += (i + 1) * r;
    r += 1;
  }
  EXPECT_EQ(run(R"(
    ldxdw %r2, [%r1+0]
    mov %r0, 0
    mov %r3, 0
  l:
    mov %r4, %r3
    add %r4, 1
    mul %r4, %r2
    add %r0, %r4
    add %r2, 1
    add %r3, 1
    jlt %r3, 20, l
    exit
  )",
                seed),
            x);
  x = 0;
  for (uint64_t i = 0; i < 40; i += 3) x += i * seed;
  EXPECT_EQ(run(R"(
    ldxdw %r2, [%r1+0]
    mov %r0, 0
    mov %r3, 0
  l:
    mov %r4, %r3
    mul %r4, %r2
    add %r0, %r4
    add %r3, 1
    add %r3, 2
    jlt %r3, 40, l
    exit
  )",
                seed),
            x);
  for (uint64_t start : {0ull, 1ull}) {
    // ctx 0: enter at i = 10 through the jump, else at i = 0 by falling in.
    x = 0;
    for (uint64_t i = start ? 0 : 10; i < 16; ++i) x += i * 5;
    EXPECT_EQ(run(R"(
      ldxdw %r1, [%r1+0]
      mov %r0, 0
      mov %r3, 10
      jeq %r1, 0, l
      mov %r3, 0
    l:
      mov %r4, %r3
      mul %r4, 5
      add %r0, %r4
      add %r3, 1
      jlt %r3, 16, l
      exit
    )",
                  start),
              x)
        << start;
  }
  // R written in the loop by an lddw (two slots) before the group.
  x = 0;
  for (uint64_t i = 2; i < 12; ++i) x += i * 0x100000003ull;
  EXPECT_EQ(run(R"(
    ldxdw %r2, [%r1+0]
    mov %r0, 0
    mov %r3, 2
  l:
    lddw %r2, 0x100000003
    mov %r4, %r3
    mul %r4, %r2
    add %r0, %r4
    add %r3, 1
    jlt %r3, 12, l
    exit
  )",
                seed),
            x);
  x = 0;
  for (uint64_t i = 0; i < 9; ++i) x += static_cast<uint32_t>((i + 0x7fffffff) * static_cast<uint32_t>(seed));
  EXPECT_EQ(run(R"(
    ldxdw %r2, [%r1+0]
    mov %r0, 0
    mov %r3, 0
  l:
    mov %r4, %r3
    add %r4, 0x7fffffff
    mul32 %r4, %r2
    add %r0, %r4
    add %r3, 1
    jlt %r3, 9, l
    exit
  )",
                seed),
            x);
}

// A remainder decomposed as `mov Q, A; div Q, B; mul Q, B; mov R, A; sub R, Q`: one
// mod when Q is dead after it, for B a register (0 included: both give A) or a
// constant; left as it is when Q is still read, when R is B, or in 32 bits.
TEST_P(JitFusion, DecomposedRemainder) {
  // r1 = A, r2 = B (the context), r3 = Q, R = r4 unless said; `width` "" or "32".
  auto prog = [](const std::string& width, const std::string& r, const std::string& after) {
    return "ldxdw %r2, [%r1+0]\nlddw %r1, 0xfedcba9876543210\nmov %r3, %r1\ndiv" + width + " %r3, %r2\nmul" + width +
           " %r3, %r2\nmov %r" + r + ", %r1\nsub %r" + r + ", %r3\nmov %r0, %r" + r + "\n" + after + "exit\n";
  };
  const uint64_t a = 0xfedcba9876543210ull;
  for (uint64_t b : {0ull, 1ull, 7ull, 0x100000000ull, ~0ull}) EXPECT_EQ(run(prog("", "4", ""), b), b ? a % b : a) << b;
  EXPECT_EQ(run(R"(
    ldxdw %r1, [%r1+0]
    mov %r0, %r1
    div %r0, 1000
    mul %r0, 1000
    mov %r5, %r1
    sub %r5, %r0
    mov %r0, %r5
    exit
  )",
                a),
            a % 1000);
  // Q read after: the quotient times B is added back.
  for (uint64_t b : {0ull, 9ull}) EXPECT_EQ(run(prog("", "4", "add %r0, %r3\n"), b), a) << b;
  // R is B: B changes before the sub reads Q.
  EXPECT_EQ(run(prog("", "2", ""), 10), a % 10);
  // 32 bits: div32 and mul32 truncate.
  EXPECT_EQ(run(prog("32", "4", ""), 10),
            a - static_cast<uint64_t>(static_cast<uint32_t>(static_cast<uint32_t>(a) / 10u * 10u)));
}

// Byte fills in 16-bit lanes (bpf_jit.cpp, "Byte fills"). `fill` writes the program:
// a loop storing byte (((I + K) * R) >> S) at base + I + off for I from `start` while
// `jop` I, N holds, then a second loop summing the bytes written (which no fill
// matches: it loads), and the T and I the fill left. `expect` is the same in C. Each
// case is an edge the chunks must get right: a remainder after the last chunk, an
// entry with 16 or fewer iterations left (one chunk exactly, none), a loop whose exit
// is taken at its first iteration, S < 8 (the mask) and S = 0, K negative or 0, R a
// register with bits beyond 16 (and 64-bit wraparound) or a negative constant, the
// base in another register, a store offset, `jne`.
struct Fill {
  uint64_t start, n;
  int32_t k;
  int s;  // -1: no shift
  std::string r = "%r2";  // a register (the context's value) or a constant
  std::string jop = "jlt";
  bool base_r6 = false;  // the buffer's address in r6, else r10-512 in the group
  int off = 0;
  bool rsh32 = false;  // the shift a 32-bit one
  // The value stepped in r9 (`add %r9, R` after reading it: clang -O2's own reduction)
  // instead of `mov T, I; add T, K; mul T, R`; r9's last value is in the result too.
  bool stepped = false;
};

std::string fill_program(const Fill& f) {
  std::string t = "ldxdw %r2, [%r1+0]\nmov %r6, %r10\nadd %r6, -512\nmov %r3, " + std::to_string(f.start) + "\n";
  const std::string k = f.k ? "add %r4, " + std::to_string(f.k) + "\n" : "";
  if (f.stepped) t += "mov %r4, %r3\n" + k + "mul %r4, " + f.r + "\nmov %r9, %r4\nfill:\nmov %r4, %r9\n";
  else t += "fill:\nmov %r4, %r3\n" + k + "mul %r4, " + f.r + "\n";
  if (f.s >= 0) t += (f.rsh32 ? "rsh32 %r4, " : "rsh %r4, ") + std::to_string(f.s) + "\n";
  t += f.base_r6 ? "mov %r5, %r6\n" : "mov %r5, %r10\nadd %r5, -512\n";
  t += "add %r5, %r3\nstxb [%r5+" + std::to_string(f.off) + "], %r4\n" + (f.stepped ? "add %r9, " + f.r + "\n" : "") +
       "add %r3, 1\n" + f.jop + " %r3, " +
       std::to_string(f.n) + ", fill\n";
  const uint64_t end = std::max(f.n, f.start + 1);
  t += "mov %r7, %r4\nmov %r8, %r3\nmov %r0, 0\nmov %r3, " + std::to_string(f.start) +
       "\nsum:\nmov %r5, %r10\nadd %r5, -512\nadd %r5, %r3\nldxb %r4, [%r5+" + std::to_string(f.off) +
       "]\nmul %r0, 31\nadd %r0, %r4\nadd %r3, 1\njlt %r3, " + std::to_string(end) +
       ", sum\nmul %r0, 1000003\nadd %r0, %r7\nmul %r0, 1000003\nadd %r0, %r8\n" +
       (f.stepped ? "mul %r0, 1000003\nadd %r0, %r9\n" : "") + "exit\n";
  return t;
}

uint64_t fill_expect(const Fill& f, uint64_t r) {
  uint8_t buf[512] = {};
  uint64_t i = f.start, t = 0;
  do {
    t = (i + static_cast<uint64_t>(static_cast<int64_t>(f.k))) * r;
    if (f.s >= 0) t = (f.rsh32 ? static_cast<uint32_t>(t) : t) >> f.s;
    buf[i + static_cast<uint64_t>(f.off)] = static_cast<uint8_t>(t);
    ++i;
  } while (f.jop == "jlt" ? i < f.n : i != f.n);
  uint64_t sum = 0;
  for (uint64_t j = f.start; j < std::max(f.n, f.start + 1); ++j)
    sum = sum * 31 + buf[j + static_cast<uint64_t>(f.off)];
  const uint64_t out = (sum * 1000003 + t) * 1000003 + i;
  return f.stepped ? out * 1000003 + (i + static_cast<uint64_t>(static_cast<int64_t>(f.k))) * r : out;
}

TEST_P(JitFusion, ByteFillsInLanes) {
  const uint64_t seed = 0x9e3779b97f4a7c15ull;
  const Fill cases[] = {
      {0, 256, 1, 8},                             // bench_ebpf_engines' fnv fill: 15 chunks, 16 scalar
      {3, 200, -5, 3},                            // a remainder; the mask
      {0, 17, 0, 0},                              // one chunk, then the last iteration
      {0, 16, 1, 8},                              // N too small: no chunk
      {300, 256, 1, 8},                           // the exit at the first iteration
      {240, 256, 1, 8},                           // 16 left at the entry: no chunk
      {239, 256, 1, 8},                           // 17 left: one chunk
      {1, 100, 2, 5, "%r2", "jne"},               // jne
      {5, 400, 0, -1, "-3", "jlt", true, 7},      // no shift, a negative constant, r6, an offset
      {0, 300, -1000, 7, "0x7fffffff", "jlt", true, 0},
      {0, 256, 1, 8, "%r2", "jne", false, 0, false, true},  // clang -O2's fnv fill
      {239, 256, 3, 2, "%r2", "jlt", true, 3, false, true},
      {0, 100, -7, 0, "-5", "jne", false, 9, false, true},
  };
  for (const Fill& f : cases)
    for (uint64_t r : {seed, uint64_t{0xffffffffffff0001ull}, uint64_t{0}}) {
      const uint64_t rv = f.r == "%r2" ? r : static_cast<uint64_t>(std::stoll(f.r, nullptr, 0));
      EXPECT_EQ(run(fill_program(f), r), fill_expect(f, rv)) << fill_program(f) << "r2 = " << r;
    }
  // And 60 drawn at random (a fixed seed): any start, bound, K, S, R, offset, jump.
  uint64_t x = 0x2545f4914f6cdd1dull;
  auto draw = [&x](uint64_t n) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x % n;
  };
  for (int c = 0; c < 60; ++c) {
    Fill f{draw(300), 1 + draw(400), static_cast<int32_t>(draw(2001)) - 1000, static_cast<int>(draw(10)) - 1};
    f.off = static_cast<int>(draw(16));
    if (std::max(f.n, f.start + 1) + static_cast<uint64_t>(f.off) > 512) f.n = f.start = 100;
    if (draw(2)) f.r = std::to_string(static_cast<int32_t>(draw(1ull << 32)));
    if (f.start < f.n && draw(2)) f.jop = "jne";
    f.base_r6 = draw(2);
    f.stepped = draw(2);
    const uint64_t r = draw(~0ull);
    const uint64_t rv = f.r == "%r2" ? r : static_cast<uint64_t>(std::stoll(f.r));
    EXPECT_EQ(run(fill_program(f), r), fill_expect(f, rv)) << fill_program(f) << "r2 = " << r;
  }
}

TEST_P(JitFusion, ByteFillsNotInLanes) {
  // Loops a fill must leave to the scalar code: an instruction it does not know (the
  // base stepped up and down), T read again after the store, the step before the
  // store, a 32-bit shift.
  const uint64_t seed = 0x0123456789abcdefull;
  auto with = [](std::string from, const std::string& what, const std::string& by) {
    from.replace(from.find(what), what.size(), by);
    return from;
  };
  const Fill f{0, 64, 1, 8, "%r2", "jlt", true, 0};
  const std::string base = fill_program(f);
  const uint64_t plain = fill_expect(f, seed);
  EXPECT_EQ(run(base, seed), plain);
  // r6 stepped up and down in the loop: the same addresses, a base the loop writes.
  EXPECT_EQ(run(with(base, "add %r3, 1\njlt", "add %r6, 1\nadd %r6, -1\nadd %r3, 1\njlt"), seed), plain);
  // T read after the store (r0 is then overwritten: the result is unchanged).
  EXPECT_EQ(run(with(base, "add %r3, 1\njlt", "mov %r0, %r4\nadd %r3, 1\njlt"), seed), plain);
  // I stepped before the address group, the offset -1: the same addresses.
  const std::string early = with(with(with(base, "add %r3, 1\njlt", "jlt"), "mov %r5, %r6", "add %r3, 1\nmov %r5, %r6"),
                                 "[%r5+0]", "[%r5-1]");
  EXPECT_EQ(run(early, seed), plain);
  // A 32-bit shift (T's high half cleared).
  Fill w = f;
  w.rsh32 = true;
  EXPECT_EQ(run(fill_program(w), seed), fill_expect(w, seed));
}

INSTANTIATE_TEST_SUITE_P(Both, JitFusion, ::testing::Values(EngineKind::interpreter, EngineKind::jit),
                         [](const ::testing::TestParamInfo<EngineKind>& i) { return engine_name(i.param); });

}  // namespace
