// The text patcher: validation before any write, batch cost, the trap handler's
// emulation of a site caught mid-patch, and chaining to the program's own handler.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "arch/arch.hpp"
#include "os/exec_memory.hpp"
#include "os/text_writer.hpp"
#include "patch/patcher.hpp"
#include "patch/trap_table.hpp"

using namespace utramp;

extern "C" {
// Entry: one 5-byte NOP (the canonical site), then the body.
__attribute__((noinline, used)) int patch_target(int x);
__attribute__((noinline, used)) int patch_target2(int x);
__attribute__((noinline, used)) int patch_alone(int x);
__attribute__((noinline, used)) void foreign_trap(void);
}

// Written in assembly so the site bytes do not depend on the compiler: NAME's entry is
// one 5-byte NOP (the canonical site), then it returns x + K.
#define SITE_FUNCTION(name, k)                                                         \
  "  .globl " #name "\n  .type " #name ", @function\n" #name ":\n"                      \
  "  .byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n  leal " #k "(%rdi), %eax\n  ret\n  .size " #name \
  ", .-" #name "\n"
asm("  .text\n"  //
    SITE_FUNCTION(patch_target, 1) SITE_FUNCTION(patch_target2, 2) SITE_FUNCTION(patch_alone, 3)
    R"(
  .globl foreign_trap
  .type foreign_trap, @function
foreign_trap:
  int3
  ret
  .size foreign_trap, .-foreign_trap
)");
#undef SITE_FUNCTION

namespace {

uint64_t addr_of(void* f) { return reinterpret_cast<uint64_t>(f); }

std::vector<uint8_t> bytes(uint64_t a, size_t n) {
  auto* p = reinterpret_cast<const uint8_t*>(a);
  return {p, p + n};
}

std::vector<uint8_t> nop5() { return {arch::kNop5.begin(), arch::kNop5.end()}; }

struct StubFixture : ::testing::Test {
  void SetUp() override {
    site = addr_of(reinterpret_cast<void*>(&patch_target));
    const auto w = arch::rel32_window(site);
    auto b = os::ExecArena::instance().allocate(32, w.lo, w.hi);
    ASSERT_TRUE(b.ok());
    block = *b;
    auto code = arch::emit_counting_stub(block.addr, reinterpret_cast<uint64_t>(&counter));
    ASSERT_TRUE(code.ok());
    ASSERT_TRUE(os::ExecArena::instance().write(block, 0, *code).ok());
  }
  void TearDown() override {
    // Whatever a test did, leave the site as found.
    if (bytes(site, 5) != nop5()) {
      patch::PatchOp op{site, bytes(site, 5), nop5(), patch::Emulation::jump_to(site + 5), "restore"};
      ASSERT_TRUE(patch::apply({&op, 1}).ok());
    }
    os::ExecArena::instance().free(block);
  }
  // Both sites, NOP -> call of the stub (to) or back (from), in one batch's ops.
  std::vector<patch::PatchOp> two_calls(bool to) const {
    std::vector<patch::PatchOp> ops;
    for (const uint64_t at : {site, addr_of(reinterpret_cast<void*>(&patch_target2))}) {
      auto c = arch::encode_call(at, block.addr);
      std::vector<uint8_t> call(c->begin(), c->end());
      if (to) ops.push_back({at, nop5(), call, patch::Emulation::call(block.addr, at + 5), "to"});
      else ops.push_back({at, call, nop5(), patch::Emulation::jump_to(at + 5), "back"});
    }
    return ops;
  }
  // Applies OPS; the syncs and writes it took.
  static std::pair<uint64_t, uint64_t> cost_of(const std::vector<patch::PatchOp>& ops) {
    const auto s0 = patch::stats();
    EXPECT_TRUE(patch::apply(ops).ok());
    const auto s1 = patch::stats();
    return {s1.syncs - s0.syncs, s1.writes - s0.writes};
  }
  uint64_t site = 0;
  os::ExecBlock block;
  uint64_t counter = 0;
};

TEST_F(StubFixture, PatchesCallAndBack) {
  auto call = arch::encode_call(site, block.addr);
  ASSERT_TRUE(call.ok());
  std::vector<uint8_t> cb(call->begin(), call->end());
  patch::PatchOp op{site, nop5(), cb, patch::Emulation::call(block.addr, site + 5), "patch_target+0x0"};
  ASSERT_TRUE(patch::apply({&op, 1}).ok());
  EXPECT_EQ(bytes(site, 5), cb);
  EXPECT_EQ(patch_target(41), 42);
  EXPECT_EQ(counter, 1u);
  patch::PatchOp back{site, cb, nop5(), patch::Emulation::jump_to(site + 5), "patch_target+0x0"};
  ASSERT_TRUE(patch::apply({&back, 1}).ok());
  EXPECT_EQ(bytes(site, 5), nop5());
  EXPECT_EQ(patch_target(1), 2);
  EXPECT_EQ(counter, 1u);
}

TEST_F(StubFixture, MismatchChangesNothingAndShowsBytes) {
  const uint64_t site2 = addr_of(reinterpret_cast<void*>(&patch_target2));
  auto call1 = arch::encode_call(site, block.addr);
  auto call2 = arch::encode_call(site2, block.addr);
  ASSERT_TRUE(call1.ok() && call2.ok());
  std::vector<uint8_t> wrong = {0xe8, 0, 0, 0, 0};
  patch::PatchOp ops[2] = {
      {site, nop5(), {call1->begin(), call1->end()}, patch::Emulation::call(block.addr, site + 5),
       "patch_target+0x0"},
      {site2, wrong, {call2->begin(), call2->end()}, patch::Emulation::call(block.addr, site2 + 5),
       "patch_target2+0x0"}};
  const auto before = patch::stats();
  auto r = patch::apply(ops);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::bytes_mismatch);
  EXPECT_NE(r.error().message.find("patch_target2+0x0"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("bytes seen 0f 1f 44 00 00"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("expected e8 00 00 00 00"), std::string::npos) << r.error().message;
  EXPECT_EQ(bytes(site, 5), nop5()) << "the valid op of a failed batch must not be applied";
  EXPECT_EQ(bytes(site2, 5), nop5());
  EXPECT_EQ(patch::stats().syncs, before.syncs);
}

TEST(Patcher, RefusesNonExecutableMemory) {
  static uint8_t data[16] = {0x0f, 0x1f, 0x44, 0x00, 0x00};
  patch::PatchOp op{addr_of(data), nop5(), {0xe9, 0, 0, 0, 0}, {}, "data"};
  auto r = patch::apply({&op, 1});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::not_executable);
  EXPECT_NE(r.error().message.find("not in executable memory"), std::string::npos);
  EXPECT_EQ(data[0], 0x0f);
}

// An op may name itself through describe(of), called only for a diagnostic.
TEST(Patcher, ADescribedOpIsNamedOnlyInItsRefusal) {
  static int described = 0;
  auto describe = [](const void* of) {
    ++described;
    return std::string(static_cast<const char*>(of));
  };
  const uint64_t site = addr_of(reinterpret_cast<void*>(&patch_target));
  patch::PatchOp same{site, nop5(), nop5(), {}, "", false, describe, "described_fn+0x0"};
  ASSERT_TRUE(patch::apply({&same, 1}).ok());
  EXPECT_EQ(described, 0);
  patch::PatchOp bad{site, {0xe8, 0, 0, 0, 0}, {0xe9, 0, 0, 0, 0}, {}, "", false, describe, "described_fn+0x0"};
  auto r = patch::apply({&bad, 1});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("described_fn+0x0"), std::string::npos) << r.error().message;
  EXPECT_EQ(described, 1);
  EXPECT_EQ(bytes(site, 5), nop5());
}

TEST(Patcher, RefusesOverlapAndBadLengths) {
  const uint64_t site = addr_of(reinterpret_cast<void*>(&patch_target));
  std::vector<uint8_t> n5 = nop5();
  patch::PatchOp bad_len{site, n5, {0x90}, {}, "x"};
  EXPECT_EQ(patch::apply({&bad_len, 1}).error().code, Errc::invalid_argument);
  auto t = arch::encode_jmp(site, site + 5);
  ASSERT_TRUE(t.ok());
  std::vector<uint8_t> j(t->begin(), t->end());
  patch::PatchOp overlap[2] = {{site, n5, j, {}, "a"}, {site + 2, {0x44, 0x00}, {0x90, 0x90}, {}, "b"}};
  auto r = patch::apply(overlap);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::invalid_argument);
  EXPECT_EQ(bytes(site, 5), n5);
}

// A thread that stays for the test's scope, waiting: the process is not alone.
class OtherThread {
 public:
  OtherThread() : t_([this] {
    std::unique_lock l(mu_);
    cv_.wait(l, [this] { return done_; });
  }) {}
  ~OtherThread() {
    {
      std::lock_guard l(mu_);
      done_ = true;
    }
    cv_.notify_all();
    t_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread t_;
};

TEST_F(StubFixture, BatchCostsThreeSyncsWhateverItsSize) {
  const OtherThread other;  // the int3 protocol: another thread may run the sites
  ASSERT_GT(*os::thread_count(), 1u);
  // The two sites are a few bytes apart: one coalesced write per step.
  EXPECT_EQ(cost_of(two_calls(true)), std::make_pair(uint64_t{3}, uint64_t{3}));
  EXPECT_EQ(patch_target2(1), 3);
  EXPECT_EQ(counter, 1u);
  const auto back = two_calls(false);
  ASSERT_TRUE(patch::apply(back).ok());
  // Re-applying what is already there is a no-op: no writes, no syncs.
  const auto s2 = patch::stats();
  ASSERT_TRUE(patch::apply(back).ok());
  EXPECT_EQ(patch::stats().syncs, s2.syncs);
}

// Alone (no other thread), a batch writes each op whole at once: one write for sites
// that share a page, one sync, no int3 (nothing is trapped), and the code runs as new.
TEST_F(StubFixture, BatchOfAProcessAloneIsOneWriteAndOneSync) {
  auto n = os::thread_count();
  ASSERT_TRUE(n.ok());
  if (*n != 1) GTEST_SKIP() << "the test process runs " << *n << " threads";
  const auto ops = two_calls(true);
  EXPECT_EQ(cost_of(ops), std::make_pair(uint64_t{1}, uint64_t{1}));
  const auto s1 = patch::stats();
  EXPECT_EQ(bytes(site, 5), ops[0].replacement);
  EXPECT_EQ(patch_target2(1), 3);
  EXPECT_EQ(counter, 1u);
  EXPECT_EQ(patch::stats().traps_emulated, s1.traps_emulated);
  ASSERT_TRUE(patch::apply(two_calls(false)).ok());
  EXPECT_EQ(bytes(site, 5), nop5());
  EXPECT_EQ(patch_target2(1), 3);
  EXPECT_EQ(counter, 1u);
}

// Alone, no thread can trap mid-batch: the ops get no trap-table entry (whose pages
// were most of a recording's start-up faults in the patcher), an int3 that stays does.
TEST_F(StubFixture, BatchOfAProcessAloneMakesNoTrapEntryButForAnInt3ThatStays) {
  auto n = os::thread_count();
  ASSERT_TRUE(n.ok());
  if (*n != 1) GTEST_SKIP() << "the test process runs " << *n << " threads";
  const uint64_t at = addr_of(reinterpret_cast<void*>(&patch_alone));
  ASSERT_EQ(patch::TrapTable::instance().find(at), nullptr) << "no batch touched patch_alone before";
  auto c = arch::encode_call(at, block.addr);
  ASSERT_TRUE(c.ok());
  const std::vector<uint8_t> call(c->begin(), c->end());
  patch::PatchOp to{at, nop5(), call, patch::Emulation::call(block.addr, at + 5), "patch_alone+0x0"};
  ASSERT_TRUE(patch::apply({&to, 1}).ok());
  EXPECT_EQ(patch_alone(1), 4);
  EXPECT_EQ(counter, 1u);
  EXPECT_EQ(patch::TrapTable::instance().find(at), nullptr);
  std::vector<uint8_t> trapped = nop5();
  trapped[0] = arch::kTrapByte;
  patch::PatchOp keep{at, call, trapped, patch::Emulation::call(block.addr, at + 5), "patch_alone+0x0", true};
  ASSERT_TRUE(patch::apply({&keep, 1}).ok());
  ASSERT_NE(patch::TrapTable::instance().find(at), nullptr);
  EXPECT_EQ(patch_alone(1), 4);
  EXPECT_EQ(counter, 2u) << "the int3 that stays sends the call to the stub";
  patch::PatchOp back{at, trapped, nop5(), patch::Emulation::jump_to(at + 5), "patch_alone+0x0"};
  ASSERT_TRUE(patch::apply({&back, 1}).ok());
  EXPECT_EQ(patch::TrapTable::instance().find(at)->emu.load(), 0u) << "the emulation is withdrawn";
  EXPECT_EQ(patch_alone(1), 4);
  EXPECT_EQ(counter, 2u);
}

// An op's bytes: short ones in place, long ones (a probe's region) on the heap; copies,
// moves, appends and comparisons keep them whole either way.
TEST(OpBytes, ShortAndLongBytesCopyMoveAndCompare) {
  for (const size_t len : {size_t{5}, patch::OpBytes::kInline, patch::OpBytes::kInline + 1, size_t{100}}) {
    std::vector<uint8_t> v(len);
    for (size_t i = 0; i < len; ++i) v[i] = static_cast<uint8_t>(i * 7 + 1);
    patch::OpBytes a(v);
    ASSERT_EQ(a.size(), len);
    EXPECT_TRUE(a == v);
    patch::OpBytes b = a;
    EXPECT_TRUE(b == a);
    patch::OpBytes m = std::move(b);
    EXPECT_TRUE(m == v);
    EXPECT_TRUE(b.empty());
    patch::OpBytes grown(v.begin(), v.begin() + len / 2);
    grown.append(v.begin() + len / 2, v.end());
    EXPECT_TRUE(grown == v);
    grown.push_back(0xcc);
    EXPECT_EQ(grown.size(), len + 1);
    EXPECT_EQ(grown[len], 0xcc);
    EXPECT_FALSE(grown == v);
    std::swap(a, grown);
    EXPECT_TRUE(grown == v);
    EXPECT_EQ(a.size(), len + 1);
  }
}

// Inside a ThreadCountOnce, thread_count() answers without scanning /proc/self/task
// again, and the scope ends with the outermost one (a batch of thousands of sites asked
// it per site: issue 17).
TEST(ThreadCount, OneScanPerScope) {
  const uint64_t s0 = os::thread_scans();
  {
    const os::ThreadCountOnce once;
    EXPECT_EQ(os::thread_scans() - s0, 1u);
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(os::thread_count().ok());
    {
      const os::ThreadCountOnce inner;
      ASSERT_TRUE(os::thread_count().ok());
    }
    ASSERT_TRUE(os::thread_count().ok());
    EXPECT_EQ(os::thread_scans() - s0, 1u);
  }
  ASSERT_TRUE(os::thread_count().ok());
  EXPECT_EQ(os::thread_scans() - s0, 2u);
}

// A thread reaching a site between the int3 and the final byte is sent on as the new
// instruction would: here the int3 stays in place with a call emulation published, as
// in the middle of a batch.
TEST_F(StubFixture, TrappedThreadIsSentOnAsTheNewInstruction) {
  ASSERT_TRUE(patch::install_trap_handler().ok());
  auto* e = patch::TrapTable::instance().insert(site);
  ASSERT_NE(e, nullptr);
  e->emu.store(patch::TrapTable::pack(patch::Emulation::call(block.addr, site + 5), site));
  const uint8_t int3 = arch::kTrapByte;
  ASSERT_TRUE(os::write_text(site, {&int3, 1}).ok());
  const auto s0 = patch::stats();
  EXPECT_EQ(patch_target(10), 11);
  EXPECT_EQ(patch_target(20), 21);
  EXPECT_EQ(counter, 2u) << "the emulated call must reach the stub";
  EXPECT_EQ(patch::stats().traps_emulated - s0.traps_emulated, 2u);
  // Jump emulation: straight past the site.
  e->emu.store(patch::TrapTable::pack(patch::Emulation::jump_to(site + 5), site));
  EXPECT_EQ(patch_target(30), 31);
  EXPECT_EQ(counter, 2u);
  e->emu.store(0);
  const uint8_t nop0 = arch::kNop5[0];
  ASSERT_TRUE(os::write_text(site, {&nop0, 1}).ok());
  EXPECT_EQ(patch_target(1), 2);
}

// An op marked keep_trap (its new bytes begin with int3) keeps it: every call traps and
// is sent on as its emulation says, after the batch too; a batch with the same bytes
// and another emulation only changes where threads go; going back withdraws it, and a
// call then runs the site's own bytes again.
TEST_F(StubFixture, AnInt3ThatStaysDivertsEveryCall) {
  std::vector<uint8_t> trapped = nop5();
  trapped[0] = arch::kTrapByte;
  patch::PatchOp op{site, nop5(), trapped, patch::Emulation::call(block.addr, site + 5), "patch_target+0x0",
                    true};
  ASSERT_TRUE(patch::apply({&op, 1}).ok());
  EXPECT_EQ(bytes(site, 5), trapped);
  const auto s0 = patch::stats();
  EXPECT_EQ(patch_target(10), 11);
  EXPECT_EQ(patch_target(20), 21);
  EXPECT_EQ(counter, 2u) << "each call must reach the stub through the trap";
  EXPECT_EQ(patch::stats().traps_emulated - s0.traps_emulated, 2u);
  patch::PatchOp past{site, trapped, trapped, patch::Emulation::jump_to(site + 5), "patch_target+0x0", true};
  ASSERT_TRUE(patch::apply({&past, 1}).ok());
  EXPECT_EQ(patch_target(30), 31);
  EXPECT_EQ(counter, 2u) << "the new emulation jumps past the stub";
  patch::PatchOp back{site, trapped, nop5(), patch::Emulation::jump_to(site + 5), "patch_target+0x0"};
  ASSERT_TRUE(patch::apply({&back, 1}).ok());
  EXPECT_EQ(bytes(site, 5), nop5());
  const auto s1 = patch::stats();
  EXPECT_EQ(patch_target(1), 2);
  EXPECT_EQ(patch::stats().traps_emulated, s1.traps_emulated);
  EXPECT_EQ(patch::TrapTable::instance().find(site)->emu.load(), 0u) << "the emulation is withdrawn";
  // Unmarked (a probe's int3: the probe layer's hook handles it), the emulation goes
  // once the batch ends. Nothing calls the function meanwhile.
  patch::PatchOp probe{site, nop5(), trapped, patch::Emulation::jump_to(site + 5), "patch_target+0x0"};
  ASSERT_TRUE(patch::apply({&probe, 1}).ok());
  EXPECT_EQ(bytes(site, 5), trapped);
  EXPECT_EQ(patch::TrapTable::instance().find(site)->emu.load(), 0u);
  ASSERT_TRUE(patch::apply({&back, 1}).ok());
}

// An int3 that stays and only changes where it sends threads is part of its batch: a
// batch that fails (here a second op whose bytes are not what it expects) changes
// nothing, the old emulation included.
TEST_F(StubFixture, AFailedBatchKeepsTheEmulationOfAnInt3ThatStays) {
  std::vector<uint8_t> trapped = nop5();
  trapped[0] = arch::kTrapByte;
  patch::PatchOp op{site, nop5(), trapped, patch::Emulation::call(block.addr, site + 5), "patch_target+0x0",
                    true};
  ASSERT_TRUE(patch::apply({&op, 1}).ok());
  const uint64_t other = addr_of(reinterpret_cast<void*>(&patch_target2));
  std::vector<uint8_t> wrong = nop5();
  wrong[1] ^= 0xff;
  patch::PatchOp batch[] = {
      {site, trapped, trapped, patch::Emulation::jump_to(site + 5), "patch_target+0x0", true},
      {other, wrong, trapped, patch::Emulation::jump_to(other + 5), "patch_target2+0x0"}};
  auto r = patch::apply(batch);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::bytes_mismatch);
  EXPECT_EQ(patch_target(10), 11);
  EXPECT_EQ(counter, 1u) << "the failed batch must not have retargeted the int3";
  patch::PatchOp back{site, trapped, nop5(), patch::Emulation::jump_to(site + 5), "patch_target+0x0"};
  ASSERT_TRUE(patch::apply({&back, 1}).ok());
}

// Slots follow addresses (a slot per 16 bytes, wrapping every 16 MiB): sites closer
// than that, and sites a multiple of 16 MiB apart, share a slot's neighbourhood; each
// is still its own entry, found again, and an address never inserted is not found.
// (Addresses no code is at: the table only maps them, nothing traps there.)
TEST(TrapTable, NeighbouringAndAliasedSitesAreEachFound) {
  auto& t = patch::TrapTable::instance();
  const uint64_t base = 0x7e1234567800ull;
  const uint64_t wrap = uint64_t{16} * patch::TrapTable::kCapacity;
  const uint64_t addrs[] = {base, base + 1, base + 5, base + 15, base + 16, base + wrap,
                            base + 2 * wrap + 1, base + 3 * wrap};
  std::vector<patch::TrapTable::Entry*> entries;
  for (uint64_t a : addrs) {
    auto* e = t.insert(a);
    ASSERT_NE(e, nullptr) << std::hex << a;
    for (auto* other : entries) EXPECT_NE(e, other) << std::hex << a;
    entries.push_back(e);
  }
  for (size_t i = 0; i < std::size(addrs); ++i) {
    EXPECT_EQ(t.find(addrs[i]), entries[i]) << std::hex << addrs[i];
    EXPECT_EQ(t.insert(addrs[i]), entries[i]) << "inserted twice: " << std::hex << addrs[i];
  }
  EXPECT_EQ(t.find(base + 2), nullptr);
  EXPECT_EQ(t.find(base + 4 * wrap), nullptr);
}

// A table nothing was inserted into answers find() without reading an entry: its
// slots are zero pages until touched, and a process that is alone asks for every site it
// patches (each read of an untouched page of slots faults one in).
TEST(TrapTable, AnEmptyTableReadsNoEntry) {
  auto& t = patch::TrapTable::instance();
  if (t.size() != 0) GTEST_SKIP() << "an earlier test of this process inserted entries";
  // Addresses 64 KiB apart: 4,096 slots, a different page of slots for each.
  constexpr uint64_t kBase = 0x7e5500000000ull, kStep = 64 * 1024;
  rusage before{}, after{};
  ASSERT_EQ(getrusage(RUSAGE_SELF, &before), 0);
  for (uint64_t i = 0; i < 256; ++i) ASSERT_EQ(t.find(kBase + i * kStep), nullptr);
  ASSERT_EQ(getrusage(RUSAGE_SELF, &after), 0);
  EXPECT_LT(after.ru_minflt - before.ru_minflt, 16) << "find() read the empty table's slots";
  // One entry: finds read slots again, and find what was inserted.
  ASSERT_NE(t.insert(kBase), nullptr);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_NE(t.find(kBase), nullptr);
  EXPECT_EQ(t.find(kBase + kStep), nullptr);
}

int g_program_handler_calls = 0;
void program_handler(int, siginfo_t*, void*) { ++g_program_handler_calls; }

TEST(Patcher, ForeignTrapsGoToTheProgramsHandler) {
  struct sigaction act {}, old{};
  act.sa_sigaction = program_handler;
  act.sa_flags = SA_SIGINFO;
  sigemptyset(&act.sa_mask);
  ASSERT_EQ(sigaction(SIGTRAP, &act, &old), 0);
  // Installing ours (apply() does it) must keep theirs as the next in line.
  ASSERT_TRUE(patch::install_trap_handler().ok());
  const auto s0 = patch::stats();
  foreign_trap();  // an int3 that is not ours; the handler returns past it
  EXPECT_EQ(g_program_handler_calls, 1);
  EXPECT_EQ(patch::stats().traps_forwarded - s0.traps_forwarded, 1u);
  // A SIGTRAP sent with kill() is never ours either.
  raise(SIGTRAP);
  EXPECT_EQ(g_program_handler_calls, 2);
  sigaction(SIGTRAP, &old, nullptr);
}


// A foreign trap is given to the program's handler as the kernel would give it: with
// the handler's mask blocked while it runs, and, installed with SA_RESETHAND, the
// default action back once it ran (its flags and mask kept, as the kernel keeps them).
// restore_program_trap_action then gives the kernel the program's action again.
sig_atomic_t g_usr2_blocked_in_handler = -1;
void once_handler(int, siginfo_t*, void*) {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  g_usr2_blocked_in_handler = sigismember(&now, SIGUSR2);
}

TEST(Patcher, ForwardingHonoursTheProgramsMaskAndFlags) {
  struct sigaction act {}, old{};
  act.sa_sigaction = once_handler;
  act.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&act.sa_mask);
  sigaddset(&act.sa_mask, SIGUSR2);
  ASSERT_EQ(sigaction(SIGTRAP, &act, &old), 0);
  ASSERT_TRUE(patch::install_trap_handler().ok());
  foreign_trap();
  EXPECT_EQ(g_usr2_blocked_in_handler, 1);
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  EXPECT_EQ(sigismember(&now, SIGUSR2), 0) << "the handler's mask outlived it";
  struct sigaction seen {};
  ASSERT_TRUE(patch::set_program_trap_action(nullptr, &seen).ok());
  EXPECT_EQ(seen.sa_handler, SIG_DFL) << "SA_RESETHAND: the default action once the handler ran";
  EXPECT_EQ(seen.sa_flags & SA_RESETHAND, SA_RESETHAND);
  EXPECT_EQ(sigismember(&seen.sa_mask, SIGUSR2), 1);
  ASSERT_TRUE(patch::restore_program_trap_action().ok());
  struct sigaction kernel {};
  ASSERT_EQ(sigaction(SIGTRAP, nullptr, &kernel), 0);
  EXPECT_EQ(kernel.sa_handler, SIG_DFL) << "utramp's handler is still the kernel's action";
  sigaction(SIGTRAP, &old, nullptr);
}

}  // namespace
