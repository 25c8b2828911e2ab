// The verifier's case suite: every case of tests/ebpf/verifier/*.cases (format in
// verifier_cases.hpp), one test each.
//
//   refuse   the program must fail to load (the structural check or the verifier) with
//            a message that starts at the instruction named ("insn N") and contains the
//            case's words;
//   accept   it must load, and then run with no fault on the interpreter with every
//            run-time check on (strict memory, the loop budget, store checks) and on the
//            proven JIT code (no checks), both returning the same r0 when the program
//            calls no helper whose result varies (time, random numbers, the CPU).
//
// VerifierSuite.Counts requires at least 500 refused and 200 accepted cases.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <set>

#include "conformance_data.hpp"
#include "ebpf/check.hpp"
#include "verifier_cases.hpp"
#include "verifier_gen.hpp"

namespace {

using namespace utramp;
using namespace utramp::ebpf;
using namespace utramp::ebpf::testing;

std::filesystem::path cases_dir() { return std::filesystem::path(UTRAMP_EBPF_TEST_DIR) / "verifier"; }

const std::vector<VerifierCase>& cases() {
  static const std::vector<VerifierCase> all = [] {
    auto c = all_cases(cases_dir());
    if (!c) {
      ADD_FAILURE() << c.error().message;
      return std::vector<VerifierCase>{};
    }
    return *c;
  }();
  return all;
}

std::vector<size_t> indices() {
  std::vector<size_t> out(cases().size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = i;
  return out;
}

// Whether two runs of P on the same inputs must give the same r0: not when it reads the
// clock, a random number, the cpu or pid, nor when it copies with bpf_probe_read (4) from
// a context smaller than the longest copy the generator makes (under 80 bytes): the bytes
// past the context are whatever lies beside each run's sandbox.
bool deterministic(const std::vector<Insn>& p, uint32_t ctx_size) {
  for (const Insn& i : p) {
    if (i.code != op::kCallOp || i.src != op::kCallHelper) continue;
    if (i.imm == 5 || i.imm == 7 || i.imm == 8 || i.imm == 125) return false;
    if (i.imm == 4 && ctx_size < 80) return false;
  }
  return true;
}

class VerifierCases : public ::testing::TestWithParam<size_t> {};

TEST_P(VerifierCases, Case) {
  const VerifierCase& c = cases()[GetParam()];
  SCOPED_TRACE(c.file + " " + c.name);
  auto a = assemble_case(c);
  ASSERT_TRUE(a) << a.error().message;
  ExecOptions o = case_options(c, *a);
  std::string msg;
  bool ok = true;
  if (auto chk = check_program(a->insns, o.helpers); !chk) {
    ok = false;
    msg = chk.error().message;
  } else if (auto v = verify(a->insns, verify_env(o)); !v) {
    ok = false;
    msg = v.error().message;
  }
  if (!c.accept) {
    ASSERT_FALSE(ok) << "accepted, but must be refused at insn " << c.insn << " (" << c.words << ")\n"
                     << disassemble(a->insns);
    const std::string lead = fmt::format("insn {}", c.insn);
    EXPECT_TRUE(c.any_insn ? msg.starts_with("insn ") : msg.starts_with(lead + ":") || msg.starts_with(lead + " ("))
        << "refused at another instruction than " << c.insn << ":\n" << msg;
    EXPECT_NE(msg.find(c.words), std::string::npos) << "the refusal lacks \"" << c.words << "\":\n" << msg;
    return;
  }
  ASSERT_TRUE(ok) << "refused:\n" << msg << "\n" << disassemble(a->insns);
  auto ri = run_in_sandbox(a->insns, a->refs, o, c.maps, c.ctx, EngineKind::interpreter);
  auto rj = run_in_sandbox(a->insns, a->refs, o, c.maps, c.ctx, EngineKind::jit);
  ASSERT_TRUE(ri) << ri.error().message;
  ASSERT_TRUE(rj) << rj.error().message;
  EXPECT_FALSE(ri->faulted) << "an accepted program tripped a run-time check: " << ri->fault;
  EXPECT_FALSE(rj->faulted) << rj->fault;
  if (deterministic(a->insns, c.ctx.size)) {
    EXPECT_EQ(ri->r0, rj->r0) << "interpreter and proven JIT disagree";
  }
}

std::string case_test_name(const ::testing::TestParamInfo<size_t>& info) {
  const VerifierCase& c = cases()[info.param];
  std::string n;
  for (char ch : c.name) n += ch == '+' ? std::string("p") : ch == '-' ? std::string("m") : std::string(1, ch);
  return param_test_name(fmt::format("{}_{}", c.accept ? "accept" : "refuse", n));
}

INSTANTIATE_TEST_SUITE_P(Suite, VerifierCases, ::testing::ValuesIn(indices()), case_test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(VerifierCases);

TEST(VerifierSuite, Counts) {
  size_t accept = 0, refuse = 0;
  std::set<std::string> names;
  for (const VerifierCase& c : cases()) {
    (c.accept ? accept : refuse)++;
    EXPECT_TRUE(names.insert(c.name).second) << "two cases named " << c.name << " (" << c.file << ")";
  }
  std::printf("[ verifier    ] %zu cases: %zu refused, %zu accepted\n", cases().size(), refuse, accept);
  EXPECT_GE(refuse, 500u);
  EXPECT_GE(accept, 200u);
}

// The oracle itself (run_in_sandbox on the strict interpreter) must trip on what a
// verifier off by one byte would let through, or a broken verifier passes the fuzzer
// and the accepted cases unseen: each program below runs unverified and must fault,
// and its neighbour one byte inside must not. Map `m`: 4 values of 12 bytes (stride 16),
// `e`: 4 of 8 (no padding); r10 is frame 0, a callee's frame 1 is 512 bytes down.
TEST(VerifierOracle, TripsOneByteOutsideAValueOrAFrame) {
  struct Probe {
    const char* what;
    const char* bad;   // must fault
    const char* good;  // the same one byte inside: must not
  };
  const Probe probes[] = {
      {"past a value's end, into the padding", "lddw %r1, map_value:m+12\nldxb %r0, [%r1]\nexit\n",
       "lddw %r1, map_value:m+11\nldxb %r0, [%r1]\nexit\n"},
      {"store past a value's end", "lddw %r1, map_value:m+0\nstb [%r1+12], 1\nmov %r0, 0\nexit\n",
       "lddw %r1, map_value:m+0\nstb [%r1+11], 1\nmov %r0, 0\nexit\n"},
      {"across into the next value", "lddw %r1, map_value:e+0\nldxh %r0, [%r1+7]\nexit\n",
       "lddw %r1, map_value:e+0\nldxb %r0, [%r1+7]\nexit\n"},
      {"before a value's start, into the previous one's padding",
       "lddw %r1, map_value:m+16\nldxb %r0, [%r1-1]\nexit\n",
       "lddw %r1, map_value:m+16\nldxb %r0, [%r1+0]\nexit\n"},
      {"below the frame, in a frame no call made", "ldxb %r0, [%r10-513]\nexit\n",
       "stb [%r10-512], 1\nldxb %r0, [%r10-512]\nexit\n"},
      {"a callee's store across into its caller's frame",
       "call local f\nmov %r0, 0\nexit\nf:\nstdw [%r10-4], 1\nmov %r0, 0\nexit\n",
       "call local f\nmov %r0, 0\nexit\nf:\nstdw [%r10-8], 1\nmov %r0, 0\nexit\n"},
      {"a callee's load below its frame", "call local f\nexit\nf:\nldxb %r0, [%r10-513]\nexit\n",
       "call local f\nexit\nf:\nstb [%r10-512], 3\nldxb %r0, [%r10-512]\nexit\n"},
  };
  for (const Probe& pr : probes) {
    for (const bool bad : {true, false}) {
      SCOPED_TRACE(fmt::format("{} ({})", pr.what, bad ? "one byte outside" : "one byte inside"));
      VerifierCase c;
      c.name = "oracle";
      c.ctx.kind = CtxKind::tracing;
      c.ctx.size = 16;
      c.maps = {MapSpec{"m", uint32_t(MapType::array), 4, 12, 4}, MapSpec{"e", uint32_t(MapType::array), 4, 8, 4}};
      c.text = bad ? pr.bad : pr.good;
      auto a = assemble_case(c);
      ASSERT_TRUE(a) << a.error().message;
      ExecOptions o = case_options(c, *a);
      o.unverified = true;  // what a broken verifier would pass on
      auto r = run_in_sandbox(a->insns, a->refs, o, c.maps, c.ctx, EngineKind::interpreter);
      ASSERT_TRUE(r) << r.error().message;
      EXPECT_EQ(r->faulted, bad) << (r->faulted ? r->fault : "no fault") << "\n" << disassemble(a->insns);
    }
  }
}

// The fuzzer's generator (verifier_gen.hpp) on random bytes for a few seconds: every
// program the verifier accepts runs with no fault on the interpreter with every check
// on and on the proven JIT code, both giving the same r0. UTRAMP_EBPF_SEED sets the
// seed; a failure prints it and the program.
TEST(VerifierGenerated, AcceptedProgramsNeverFault) {
  const char* env = std::getenv("UTRAMP_EBPF_SEED");
  const uint64_t seed = env ? std::strtoull(env, nullptr, 0) : 20261201;
  std::mt19937_64 rng(seed);
  const auto start = std::chrono::steady_clock::now();
  int programs = 0, accepted = 0;
  for (; programs < 20000; ++programs) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > 4.0) break;
    std::vector<uint8_t> bytes(16 + rng() % 200);
    for (auto& x : bytes) x = static_cast<uint8_t>(rng());
    const VerifierCase c = generate_case(bytes.data(), bytes.size());
    auto a = assemble_case(c);
    ASSERT_TRUE(a) << a.error().message << "\n" << c.text;
    ExecOptions o = case_options(c, *a);
    if (!check_program(a->insns, o.helpers) || !verify(a->insns, verify_env(o))) continue;
    ++accepted;
    auto ri = run_in_sandbox(a->insns, a->refs, o, c.maps, c.ctx, EngineKind::interpreter);
    auto rj = run_in_sandbox(a->insns, a->refs, o, c.maps, c.ctx, EngineKind::jit);
    ASSERT_TRUE(ri && rj) << (ri ? rj.error().message : ri.error().message);
    ASSERT_FALSE(ri->faulted) << "seed " << seed << " program " << programs << ": an accepted program tripped a "
                              << "run-time check: " << ri->fault << "\n" << disassemble(a->insns);
    ASSERT_FALSE(rj->faulted) << rj->fault;
    if (deterministic(a->insns, c.ctx.size)) {
      ASSERT_EQ(ri->r0, rj->r0) << "seed " << seed << " program " << programs << "\n" << disassemble(a->insns);
    }
  }
  std::printf("[ generated   ] seed %llu: %d programs, %d accepted\n", static_cast<unsigned long long>(seed), programs,
              accepted);
  // Both outcomes must be common, or the generator tests nothing.
  EXPECT_GT(accepted, programs / 20);
  EXPECT_LT(accepted, programs - programs / 20);
}

}  // namespace
