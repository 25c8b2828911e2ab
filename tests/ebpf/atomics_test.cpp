// Atomics from several threads on one shared, map-like buffer (a writable static region),
// interpreter and JIT threads mixed: every update must land exactly once.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <thread>

#include "ebpf/asm.hpp"
#include "ebpf/engine.hpp"

namespace {

using namespace utramp;
using namespace utramp::ebpf;

constexpr int kThreads = 4;
constexpr int kIters = 20000;

// ctx: { id, &shared }. Per iteration: add, fetch add, add32, a cmpxchg increment loop,
// xchg of the id (returned values summed into r0), xor then fetch-xor of the id (they
// cancel), or of the thread's bit, fetch-and with all ones, fetch-or32 of the bit.
const char* kProgram = R"(
  ldxdw %r6, [%r1+8]
  ldxdw %r7, [%r1+0]
  mov %r8, 0
  mov %r9, 0
loop:
  mov %r2, 1
  lock add [%r6+0], %r2
  lock fetch add [%r6+8], %r2
  mov %r2, 1
  lock add32 [%r6+16], %r2
retry:
  ldxdw %r0, [%r6+24]
  mov %r3, %r0
  add %r3, 1
  mov %r4, %r0
  lock cmpxchg [%r6+24], %r3
  jne %r0, %r4, retry
  mov %r2, %r7
  lock xchg [%r6+32], %r2
  add %r9, %r2
  lock xor [%r6+40], %r7
  mov %r2, %r7
  lock fetch xor [%r6+40], %r2
  mov %r2, 1
  lsh %r2, %r7
  lock or [%r6+48], %r2
  mov %r3, -1
  lock fetch and [%r6+56], %r3
  lock fetch or32 [%r6+64], %r2
  mov %r3, 0
  lock cmpxchg32 [%r6+72], %r3
  add %r8, 1
  jlt %r8, %r5, loop
  mov %r0, %r9
  exit
)";

TEST(EbpfAtomics, SharedBufferFromThreads) {
  alignas(64) uint64_t shared[10] = {};
  shared[7] = 0x0123456789abcdef;  // fetch-and with all ones leaves it
  ExecOptions o;
  o.regions.push_back({reinterpret_cast<uint64_t>(shared), reinterpret_cast<uint64_t>(shared + 10), true});
  // The buffer's address is a constant of the program, which the verifier cannot know
  // for memory: this tests the engines' atomics and their run-time checks.
  o.unverified = true;
  auto text = std::string(kProgram);
  // r5 is the iteration count: set it before the loop.
  text.insert(text.find("loop:"), fmt::format("  mov %r5, {}\n", kIters));
  auto prog = assemble(text);
  ASSERT_TRUE(prog) << prog.error().message;
  std::unique_ptr<Executable> engines[2];
  for (int e = 0; e < 2; ++e) {
    auto x = load(Program{"atomics", "", *prog}, o, e ? EngineKind::jit : EngineKind::interpreter);
    ASSERT_TRUE(x) << x.error().message;
    engines[e] = std::move(*x);
  }
  uint64_t returned[kThreads] = {};
  uint64_t faults[kThreads] = {};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      uint64_t ctx[2] = {static_cast<uint64_t>(t + 1), reinterpret_cast<uint64_t>(shared)};
      RunStatus st;
      returned[t] = engines[t % 2]->run(ctx, sizeof ctx, &st);
      faults[t] = st.faults.load();
    });
  for (auto& t : ts) t.join();
  uint64_t xchg_sum = 0, ids = 0, bits = 0;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(faults[t], 0u) << "thread " << t;
    xchg_sum += returned[t];
    ids += static_cast<uint64_t>(t + 1) * kIters;
    bits |= uint64_t(1) << (t + 1);
  }
  const uint64_t total = uint64_t(kThreads) * kIters;
  EXPECT_EQ(shared[0], total);
  EXPECT_EQ(shared[1], total);
  EXPECT_EQ(shared[2], total);  // add32 on the low half; the high half untouched
  EXPECT_EQ(shared[3], total);
  EXPECT_EQ(xchg_sum + shared[4], ids) << "every id written by xchg is returned once or left";
  EXPECT_EQ(shared[5], 0u);
  EXPECT_EQ(shared[6], bits);
  EXPECT_EQ(shared[7], 0x0123456789abcdefu);
  EXPECT_EQ(shared[8], bits);
  EXPECT_EQ(shared[9], 0u);
}

}  // namespace
