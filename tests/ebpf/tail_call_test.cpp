// bpf_tail_call (helper 12) on both engines, proven and unproven (the JIT's lean and
// full layouts): the target runs with the caller's context and its value is the run's,
// a missing slot or an index beyond the map falls through, the index is a u32, and an
// invocation takes at most 33 tail calls (then the call falls through and the map
// counts it), counted anew in each invocation.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "ebpf/engine.hpp"
#include "ebpf/loader.hpp"
#include "ebpf/maps.hpp"
#include "verifier_cases.hpp"

namespace {

using namespace utramp;
using namespace utramp::ebpf;
using namespace utramp::ebpf::testing;

struct Mode {
  EngineKind engine;
  bool verified;
};

class TailCalls : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    ctx_.kind = CtxKind::pt_regs;
    ctx_.size = static_cast<uint32_t>(kPtRegsSize);
    MapSpec jt;
    jt.name = "jt";
    jt.type = uint32_t(MapType::prog_array);
    jt.key_size = jt.value_size = 4;
    jt.max_entries = 4;
    MapSpec counts;
    counts.name = "counts";
    counts.type = uint32_t(MapType::array);
    counts.key_size = 4;
    counts.value_size = 8;
    counts.max_entries = 1;
    maps_ = {jt, counts};
    auto sb = Sandbox::create(maps_, ctx_);
    ASSERT_TRUE(sb) << sb.error().message;
    sb_ = std::move(*sb);
  }

  // Loads `text` (`lddw %rN, map:jt` / `map:counts`) in this test's mode.
  const Executable* add(const std::string& name, const std::string& text) {
    VerifierCase c;
    c.name = name;
    c.ctx = ctx_;
    c.maps = maps_;
    c.text = text;
    auto a = assemble_case(c);
    EXPECT_TRUE(a) << a.error().message;
    if (!a) return nullptr;
    ExecOptions o = case_options(c, *a);
    sb_->add_regions(o);
    o.unverified = !GetParam().verified;
    auto e = load(Program{name, "", sb_->resolve(a->insns, a->refs)}, o, GetParam().engine);
    EXPECT_TRUE(e) << e.error().message;
    if (!e) return nullptr;
    progs_.push_back(std::move(*e));
    return progs_.back().get();
  }
  void set(uint32_t slot, uint32_t prog_index, const Executable* e) {
    ASSERT_EQ(prog_array_set(sb_->map(0), slot, prog_index, e), 0);
  }
  // One run with pt_regs di (the index) and si (a value the handlers return).
  uint64_t run(const Executable& e, uint64_t di, uint64_t si) {
    uint64_t regs[kPtRegsSize / 8] = {};
    regs[pt_regs_offset("di") / 8] = di;
    regs[pt_regs_offset("si") / 8] = si;
    RunStatus st;
    const uint64_t r0 = e.run(regs, sizeof regs, &st);
    EXPECT_EQ(st.faults.load(), 0u) << describe_fault(e.program().insns, st.kind(), st.insn(), st.addr());
    return r0;
  }
  uint64_t count() {
    const uint32_t k = 0;
    return *static_cast<uint64_t*>(map_lookup(sb_->map(1), &k));
  }

  ContextSpec ctx_;
  std::vector<MapSpec> maps_;
  std::unique_ptr<Sandbox> sb_;
  std::vector<std::unique_ptr<Executable>> progs_;
};

// The dispatcher tail-calls slot di; each handler returns si + 1000 * its number, so the
// value shows both that the handler ran and that it got the caller's context.
constexpr const char* kDispatcher =
    "ldxdw %r3, [%r1+112]\n"
    "lddw %r2, map:jt\n"
    "call 12\n"
    "mov %r0, 100\n"
    "exit\n";
std::string handler(int k) {
  return fmt::format("ldxdw %r0, [%r1+104]\nadd %r0, {}\nexit\n", 1000 * k);
}

TEST_P(TailCalls, JumpsWithTheContextAndFallsThroughWhenNoProgram) {
  const Executable* d = add("dispatch", kDispatcher);
  const Executable* h1 = add("h1", handler(1));
  const Executable* h3 = add("h3", handler(3));
  ASSERT_TRUE(d && h1 && h3);
  set(1, 1, h1);
  set(3, 2, h3);
  EXPECT_EQ(run(*d, 1, 5), 1005u);
  EXPECT_EQ(run(*d, 3, 7), 3007u);
  EXPECT_EQ(run(*d, 0, 7), 100u);  // empty slot
  EXPECT_EQ(run(*d, 2, 7), 100u);
  EXPECT_EQ(run(*d, 4, 7), 100u);  // beyond max_entries
  EXPECT_EQ(run(*d, ~uint64_t(0), 7), 100u);
  EXPECT_EQ(run(*d, (uint64_t(1) << 32) | 1, 9), 1009u);  // the index is a u32
  // Emptied: falls through again; refilled with another program: that one runs.
  set(1, 1, nullptr);
  EXPECT_EQ(run(*d, 1, 5), 100u);
  set(1, 2, h3);
  EXPECT_EQ(run(*d, 1, 5), 3005u);
  // The map lists the set slots by program index.
  EXPECT_EQ(run(*d, 3, 0), 3000u);
}

// Adds 1 to `counts` (r1-r5 and r0 clobbered; the context kept by the caller in r6-r9).
constexpr const char* kCountRun =
    "stw [%r10-4], 0\n"
    "lddw %r1, map:counts\n"
    "mov %r2, %r10\n"
    "add %r2, -4\n"
    "call 1\n"
    "jeq %r0, 0, +2\n"
    "mov %r1, 1\n"
    "lock add [%r0+0], %r1\n";

// A program that counts its runs and tail-calls slot 0, itself: 1 run + 33 tail calls,
// then the 34th call falls through (returns 7) and is counted in the map.
const std::string kSelf = std::string("mov %r6, %r1\n") + kCountRun +
                          "mov %r1, %r6\n"
                          "lddw %r2, map:jt\n"
                          "mov %r3, 0\n"
                          "call 12\n"
                          "mov %r0, 7\n"
                          "exit\n";

TEST_P(TailCalls, AtMost33PerInvocation) {
  const Executable* self = add("self", kSelf);
  ASSERT_TRUE(self);
  set(0, 0, self);
  EXPECT_EQ(run(*self, 0, 0), 7u);
  EXPECT_EQ(count(), 1u + kMaxTailCalls);
  EXPECT_EQ(sb_->dropped(0), 1u);
  // A new invocation counts from 0 again.
  EXPECT_EQ(run(*self, 0, 0), 7u);
  EXPECT_EQ(count(), 2 * (1u + kMaxTailCalls));
  EXPECT_EQ(sb_->dropped(0), 2u);
}

// A chain through programs that differ in what they save and keep (a local call, the
// stack, callee-saved registers): each step adds to r0 of nothing (r0 starts anew), so
// the value is the last program's; the count goes along the chain (slot 0 -> 1 -> 0...).
TEST_P(TailCalls, ChainOfDifferentPrograms) {
  const Executable* a = add("a",
                            "mov %r6, %r1\n"
                            "stdw [%r10-8], 5\n"
                            "call +7\n"
                            "mov %r1, %r6\n"
                            "lddw %r2, map:jt\n"
                            "mov %r3, 1\n"
                            "call 12\n"
                            "mov %r0, 11\n"
                            "exit\n"
                            "mov %r0, 3\n"
                            "exit\n");
  const Executable* b = add("b", std::string("mov %r7, %r1\n") + kCountRun +
                                     "mov %r1, %r7\n"
                                     "lddw %r2, map:jt\n"
                                     "mov %r3, 0\n"
                                     "call 12\n"
                                     "ldxdw %r0, [%r7+104]\n"
                                     "exit\n");
  ASSERT_TRUE(a && b);
  set(0, 0, a);
  set(1, 1, b);
  // a (count 0) -> b (1) -> a (2) -> ... -> b (33): b's call is the 34th, falls through
  // and returns si. b ran 17 times (tail calls 1, 3, ..., 33).
  EXPECT_EQ(run(*a, 0, 77), 77u);
  EXPECT_EQ(count(), 17u);
  // Started at b: b, a, b, ... (33 tail calls: b ran 17 times, the last a's call falls
  // through and a returns 11).
  EXPECT_EQ(run(*b, 0, 77), 11u);
  EXPECT_EQ(count(), 34u);
}

std::string mode_name(const ::testing::TestParamInfo<Mode>& i) {
  return std::string(engine_name(i.param.engine)) + (i.param.verified ? "_verified" : "_unverified");
}
INSTANTIATE_TEST_SUITE_P(Engines, TailCalls,
                         ::testing::Values(Mode{EngineKind::interpreter, true}, Mode{EngineKind::interpreter, false},
                                           Mode{EngineKind::jit, true}, Mode{EngineKind::jit, false}),
                         mode_name);

}  // namespace
