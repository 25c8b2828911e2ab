// Unit tests of the verifier: the numeric domain is sound (every concrete result of an
// operation on values the operands contain is contained in the abstract result,
// checked on random samples against the ISA's own definitions), the message shows the
// evidence the refusal needs, the log, the proof's facts and the complexity limit.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "ebpf/alu.hpp"
#include "ebpf/asm.hpp"
#include "ebpf/bounds.hpp"
#include "ebpf/engine.hpp"
#include "ebpf/verifier.hpp"

namespace {

using namespace utramp;
using namespace utramp::ebpf;

// A random abstract value and a random member of it.
struct Sample {
  Scalar s;
  uint64_t member;
};

Sample sample(std::mt19937_64& rng) {
  auto u = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  static const uint64_t edge[] = {0, 1, 2, 7, 8, 31, 32, 63, 64, 255, 0x7fffffff, 0x80000000, 0xffffffff,
                                  0x100000000, INT64_MAX, uint64_t(INT64_MIN), ~uint64_t(0), ~uint64_t(0) - 7};
  uint64_t v = u(3) == 0 ? edge[u(std::size(edge))] : rng() >> u(64);
  switch (u(5)) {
    case 0: return {Scalar::constant(v), v};
    case 1: {
      const uint64_t w = v + u(1000);
      const uint64_t lo = std::min(v, w), hi = std::max(v, w);
      return {Scalar::urange(lo, hi), lo + u(hi - lo + 1 == 0 ? 1 : hi - lo + 1)};
    }
    case 2: {
      const int64_t a = static_cast<int64_t>(v) >> 8, b = a + static_cast<int64_t>(u(5000));
      return {Scalar::srange(a, b), static_cast<uint64_t>(a + static_cast<int64_t>(u(static_cast<uint64_t>(b - a) + 1)))};
    }
    case 3: {  // some bits known
      const uint64_t mask = rng() & rng();
      Scalar s;
      s.t = {v & ~mask, mask};
      (void)s.sync();
      return {s, (v & ~mask) | (rng() & mask)};
    }
    default: return {Scalar::unknown(), v};
  }
}

TEST(VerifierDomain, AluIsSound) {
  std::mt19937_64 rng(42);
  static const uint8_t ops[] = {op::kAdd, op::kSub, op::kMul, op::kDiv, op::kOr, op::kAnd, op::kLsh,
                                op::kRsh, op::kMod, op::kXor, op::kMov, op::kArsh, op::kNeg};
  for (int n = 0; n < 200000; ++n) {
    const Sample a = sample(rng), b = sample(rng);
    const uint8_t o = ops[rng() % std::size(ops)];
    const bool is64 = rng() & 1;
    const int16_t off = (o == op::kDiv || o == op::kMod) && (rng() & 1) ? 1 : 0;
    const Scalar r = Scalar::alu(o, off, is64, a.s, b.s);
    const uint64_t c = is64 ? isa::alu64(o, off, a.member, o == op::kNeg ? a.member : b.member)
                            : isa::alu32(o, off, static_cast<uint32_t>(a.member),
                                         static_cast<uint32_t>(o == op::kNeg ? a.member : b.member));
    ASSERT_TRUE(r.contains(Scalar::constant(c)))
        << fmt::format("op {:#x} off {} is64 {}: {} ({:#x}) op {} ({:#x}) = {:#x}, not in {}", o, off, is64, a.s.str(),
                       a.member, b.s.str(), b.member, c, r.str());
  }
}

TEST(VerifierDomain, BranchNarrowingIsSound) {
  std::mt19937_64 rng(7);
  static const uint8_t ops[] = {op::kJeq, op::kJgt, op::kJge, op::kJset, op::kJne, op::kJsgt,
                                op::kJsge, op::kJlt, op::kJle, op::kJslt, op::kJsle};
  for (int n = 0; n < 200000; ++n) {
    const Sample a = sample(rng), b = sample(rng);
    const uint8_t o = ops[rng() % std::size(ops)];
    const bool is64 = rng() & 1;
    const bool taken = is64 ? isa::cond<uint64_t, int64_t>(o, a.member, b.member)
                            : isa::cond<uint32_t, int32_t>(o, static_cast<uint32_t>(a.member),
                                                           static_cast<uint32_t>(b.member));
    const Branch out = branch_outcome(o, is64, a.s, b.s);
    ASSERT_NE(out, taken ? Branch::never : Branch::always)
        << fmt::format("op {:#x} is64 {}: {} vs {} decided wrongly for {:#x}, {:#x}", o, is64, a.s.str(), b.s.str(),
                       a.member, b.member);
    Scalar d = a.s, s = b.s;
    ASSERT_TRUE(narrow(o, is64, taken, d, s))
        << fmt::format("op {:#x} is64 {} taken {}: {} vs {} found infeasible for {:#x}, {:#x}", o, is64, taken,
                       a.s.str(), b.s.str(), a.member, b.member);
    ASSERT_TRUE(d.contains(Scalar::constant(a.member)) && s.contains(Scalar::constant(b.member)))
        << fmt::format("op {:#x} is64 {} taken {}: narrowed {} / {} lost {:#x} / {:#x}", o, is64, taken, d.str(),
                       s.str(), a.member, b.member);
  }
}

TEST(VerifierDomain, TnumBasics) {
  EXPECT_EQ(Tnum::range(0, 255), (Tnum{0, 0xff}));
  EXPECT_EQ(Tnum::constant(5).add(Tnum::constant(7)), Tnum::constant(12));
  EXPECT_TRUE(Tnum::range(0, 7).contains(Tnum::constant(5)));
  EXPECT_FALSE(Tnum::constant(8).contains(Tnum::range(0, 7)));
  const Scalar s = Scalar::alu(op::kAnd, 0, true, Scalar::unknown(), Scalar::constant(0xf0));
  EXPECT_EQ(s.umax, 0xf0u);
  EXPECT_EQ(s.t, (Tnum{0, 0xf0}));
}

VerifyEnv env_for(const ExecOptions& o, int log = 0) {
  VerifyEnv e = verify_env(o);
  e.log_level = log;
  return e;
}

ExecOptions tracing(uint32_t size = 16) {
  ExecOptions o;
  o.helpers = &runtime_helpers();
  o.ctx_kind = CtxKind::tracing;
  o.ctx_size = size;
  o.ctx_what = fmt::format("the tracing context ({} bytes)", size);
  return o;
}

TEST(Verifier, RefusalShowsInstructionLineStateAndPath) {
  auto p = assemble(R"(
    ldxdw %r1, [%r1+0]
    jgt %r1, 10, big
    mov %r2, 0
    ja done
  big:
    mov %r2, 1
  done:
    ldxdw %r0, [%r10-8]
    exit
  )");
  ASSERT_TRUE(p) << p.error().message;
  ExecOptions o = tracing();
  o.lines = {{0, "prog.bpf.c", 10, 3, "u64 n = ctx[0];"}, {5, "prog.bpf.c", 14, 5, "return *slot;"}};
  auto v = verify(*p, env_for(o));
  ASSERT_FALSE(v);
  const std::string& m = v.error().message;
  EXPECT_TRUE(m.starts_with("insn 5: ldxdw %r0, [%r10-8]\n")) << m;
  EXPECT_NE(m.find("at prog.bpf.c:14: return *slot;"), std::string::npos) << m;
  EXPECT_NE(m.find("fp0-8, a stack byte no instruction on this path wrote"), std::string::npos) << m;
  EXPECT_NE(m.find("state: r1=scalar([0, 10]) r2=0 r10=fp0"), std::string::npos) << m;
  EXPECT_NE(m.find("path: 0..1 (jgt not taken) -> 2..3 (ja) -> 5"), std::string::npos) << m;
}

TEST(Verifier, LogOfAnAcceptedProgram) {
  auto p = assemble(R"(
    mov %r0, 0
    mov %r1, 0
  loop:
    add %r0, %r1
    add %r1, 1
    jlt %r1, 10, loop
    exit
  )");
  ASSERT_TRUE(p);
  ExecOptions o = tracing();
  auto v = verify(*p, env_for(o, 2));
  ASSERT_TRUE(v) << v.error().message;
  EXPECT_NE(v->log.find("4: jlt %r1, 10, -3"), std::string::npos) << v->log;
  EXPECT_NE(v->log.find("always falls through"), std::string::npos) << v->log;  // the 10th iteration
  EXPECT_NE(v->log.find("accepted: 6 instructions"), std::string::npos) << v->log;
  EXPECT_GE(v->proof.insns_processed, 30u);
}

TEST(Verifier, InfiniteLoopAndComplexityLimit) {
  auto inf = assemble("mov %r0, 0\nloop:\nja loop\nexit\n");
  ASSERT_TRUE(inf);
  auto v = verify(*inf, env_for(tracing()));
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message.find("infinite loop"), std::string::npos) << v.error().message;
  // 2^64 iterations: never the same state, never decided: the limit ends it.
  auto big = assemble("mov %r0, 0\nloop:\nadd %r0, 1\njne %r0, 0, loop\nexit\n");
  ASSERT_TRUE(big);
  VerifyEnv e = env_for(tracing());
  e.max_insns = 100000;
  auto w = verify(*big, e);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, Errc::too_big);
  EXPECT_NE(w.error().message.find("too complex to verify: 100000 instructions processed"), std::string::npos)
      << w.error().message;
}

TEST(Verifier, ProofFacts) {
  auto p = assemble(R"(
    ldxdw %r1, [%r1+0]
    mov %r2, %r1
    or %r2, 1
    div %r1, %r2
    mov %r3, 3
    sdiv %r1, %r3
    ldxdw %r4, [%r10-8]
    ja next
    mov %r0, 9
  next:
    mov %r0, %r1
    exit
  )");
  ASSERT_TRUE(p);
  auto q = *p;
  q[6] = Insn{static_cast<uint8_t>(op::kAlu64 | op::kMov | op::kK), 4, 0, 0, 0};  // no uninitialised read
  auto v = verify(q, env_for(tracing()));
  ASSERT_TRUE(v) << v.error().message;
  const auto& f = v->proof.insn;
  EXPECT_TRUE(f[3] & Proof::kDivisorNonZero);  // r2 | 1 is never 0
  EXPECT_TRUE(f[5] & Proof::kDivisorNonZero);
  EXPECT_TRUE(f[5] & Proof::kNoOverflowDiv);   // 3 is never -1
  EXPECT_FALSE(f[8] & Proof::kReached);        // jumped over
  EXPECT_TRUE(f[9] & Proof::kReached);
}

// docs/ebpf.md lists every helper's prototype as the table defines it (one definition:
// the table; the document is checked against it).
TEST(Verifier, DocsListEveryHelperPrototype) {
  std::ifstream in(std::string(UTRAMP_EBPF_TEST_DIR) + "/../../docs/ebpf.md");
  ASSERT_TRUE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (const HelperInfo& h : runtime_helpers().all())
    EXPECT_NE(doc.find("    " + describe_proto(h) + "\n"), std::string::npos)
        << "docs/ebpf.md lacks the line:\n    " << describe_proto(h);
}

}  // namespace
