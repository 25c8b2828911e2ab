// The rules both engines share beyond the ISA (engine.hpp, memory.hpp), each test run
// on the interpreter and on the JIT: what a run starts with, local-call frames, helper
// calls, memory checks (a bad load gives 0, a bad store fails the run), atomics'
// alignment, the loop budget, the native entry, current_run() for helpers.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "abi/ctx.hpp"
#include "ebpf/asm.hpp"
#include "ebpf/engine.hpp"
#include "ebpf/jit.hpp"
#include "ebpf/helpers.hpp"
#include "ebpf/maps.hpp"

namespace {

using namespace utramp;
using namespace utramp::ebpf;

class Engines : public ::testing::TestWithParam<EngineKind> {
 protected:
  // Unverified: these tests are of the engines' run-time checks and faults, which only
  // programs loaded without a proof meet (proven code: verifier_cases_test.cpp).
  std::unique_ptr<Executable> load_text(std::string_view text, ExecOptions opts = {}) {
    opts.unverified = true;
    auto p = assemble(text);
    EXPECT_TRUE(p) << p.error().message;
    if (!p) return nullptr;
    auto e = load(Program{"test", "", std::move(*p)}, opts, GetParam());
    EXPECT_TRUE(e) << e.error().message;
    return e ? std::move(*e) : nullptr;
  }
  // Runs and expects no fault.
  uint64_t run_ok(const Executable& e, void* ctx = nullptr, uint64_t len = 0) {
    auto r = e.execute(ctx, len);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : ~uint64_t(0);
  }
  // Runs and expects a fault of kind `k` at insn `insn`; returns its message.
  std::string run_fault(const Executable& e, FaultKind k, uint32_t insn, void* ctx = nullptr,
                        uint64_t len = 0) {
    RunStatus st;
    EXPECT_EQ(e.run(ctx, len, &st), 0u);
    EXPECT_EQ(st.faults.load(), 1u);
    EXPECT_EQ(st.kind(), k) << fault_name(st.kind());
    EXPECT_EQ(st.insn(), insn);
    auto r = e.execute(ctx, len);
    EXPECT_FALSE(r);
    return r ? "" : r.error().message;
  }
};

std::string engine_param_name(const ::testing::TestParamInfo<EngineKind>& i) {
  return engine_name(i.param);
}

TEST_P(Engines, EntryState) {
  // r1 = ctx, r2 = len, every other register but r10 zero, r10 16-byte aligned.
  auto e = load_text(
      "mov %r0, %r3\nor %r0, %r4\nor %r0, %r5\nor %r0, %r6\nor %r0, %r7\nor %r0, %r8\n"
      "or %r0, %r9\nmov %r1, %r10\nand %r1, 15\nor %r0, %r1\nexit\n");
  uint64_t buf[2] = {};
  EXPECT_EQ(run_ok(*e, buf, sizeof buf), 0u);
  auto f = load_text("mov %r0, %r2\nexit\n");
  EXPECT_EQ(run_ok(*f, buf, 12), 12u);
  auto g = load_text("mov %r0, %r1\nexit\n");
  EXPECT_EQ(run_ok(*g, buf, 12), reinterpret_cast<uint64_t>(buf));
}

TEST_P(Engines, LocalCallFrames) {
  // The callee gets a fresh frame 512 bytes down, r6-r9 and r10 come back, the caller's
  // frame is reachable through a pointer, and r0 is the callee's.
  auto e = load_text(
      "stdw [%r10-8], 11\n"
      "mov %r6, 6\nmov %r9, 9\n"
      "mov %r1, %r10\nsub %r1, 8\n"
      "mov %r2, %r10\n"
      "call local f\n"
      "jne %r6, 6, bad\njne %r9, 9, bad\n"
      "mov %r3, %r10\nsub %r3, %r2\njne %r3, 0, bad\n"
      "ldxdw %r4, [%r10-8]\njne %r4, 12, bad\n"   // f incremented it through r1
      "exit\n"
      "bad: mov %r0, -1\nexit\n"
      "f: stdw [%r10-8], 99\n"
      "mov %r6, 0\nmov %r9, 0\n"
      "ldxdw %r3, [%r1]\nadd %r3, 1\nstxdw [%r1], %r3\n"
      "mov %r0, %r2\nsub %r0, %r10\n"   // 512: the caller's r10 minus ours
      "exit\n");
  EXPECT_EQ(run_ok(*e), 512u);
}

TEST_P(Engines, CallDepth) {
  // Seven nested calls (eight frames) are fine; the eighth nested one faults.
  std::string ok = "call local f1\nexit\n";
  for (int i = 1; i < 7; ++i) ok += fmt::format("f{}: call local f{}\nadd %r0, 1\nexit\n", i, i + 1);
  ok += "f7: mov %r0, 100\nexit\n";
  auto e = load_text(ok);
  EXPECT_EQ(run_ok(*e), 106u);
  auto r = load_text("mov %r0, 0\nf: add %r0, 1\ncall local f\nexit\n");
  const std::string msg = run_fault(*r, FaultKind::call_depth, 2);
  EXPECT_NE(msg.find("insn 2 (call local -2): local call deeper than 8 frames"), std::string::npos) << msg;
  // The frames a fault leaves behind are gone: the program runs again normally.
  EXPECT_EQ(run_ok(*e), 106u);
}

uint64_t helper_sum(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e) {
  return a + 2 * b + 3 * c + 4 * d + 5 * e;
}

TEST_P(Engines, Helpers) {
  HelperTable h;
  ASSERT_TRUE(h.add(1, "sum", &helper_sum));
  ExecOptions o;
  o.helpers = &h;
  auto e = load_text(
      "mov %r6, 1000\n"
      "mov %r1, 1\nmov %r2, 2\nmov %r3, 3\nmov %r4, 4\nmov %r5, 5\ncall 1\n"
      "add %r0, %r6\n"  // r6 survives the call
      "mov %r1, 1\nmov %r2, 0\nmov %r3, 0\nmov %r4, 0\nmov %r5, 0\n"
      "mov %r7, 1\ncall %r7\n"   // callx
      "add %r0, 0\nexit\n",
      o);
  EXPECT_EQ(run_ok(*e), 1u);
  auto f = load_text("mov %r1, 1\nmov %r2, 1\nmov %r3, 1\nmov %r4, 1\nmov %r5, 1\ncall 1\nmov %r6, %r0\n"
                     "mov %r1, 2\nmov %r2, 0\nmov %r3, 0\nmov %r4, 0\nmov %r5, 0\ncall 1\nadd %r0, %r6\nexit\n",
                     o);
  EXPECT_EQ(run_ok(*f), 17u);
  auto g = load_text("mov %r7, 9\ncall %r7\nexit\n", o);
  const std::string msg = run_fault(*g, FaultKind::unknown_helper, 1);
  EXPECT_NE(msg.find("callx to helper 9 which is not in the helper table"), std::string::npos) << msg;
}

uint64_t g_readable = 0x1122334455667788;

TEST_P(Engines, LoadsOutsideRegions) {
  // Readable memory outside every region is read (fault-safe copy); unreadable gives 0.
  auto e = load_text(fmt::format("lddw %r1, {:#x}\nldxdw %r0, [%r1]\nexit\n",
                                 reinterpret_cast<uint64_t>(&g_readable)));
  EXPECT_EQ(run_ok(*e), 0x1122334455667788u);
  auto z = load_text("lddw %r1, 8\nldxdw %r0, [%r1]\nldxsb %r2, [%r1+3]\nor %r0, %r2\nexit\n");
  EXPECT_EQ(run_ok(*z), 0u);
  auto k = load_text("lddw %r1, 0xffffffffffff0000\nldxw %r0, [%r1]\nexit\n");
  EXPECT_EQ(run_ok(*k), 0u);
  // A load that crosses from readable into unmapped memory gives 0 as a whole.
  void* m = mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  ASSERT_EQ(munmap(static_cast<char*>(m) + 4096, 4096), 0);
  std::memset(m, 0xab, 4096);
  auto c = load_text(fmt::format("lddw %r1, {:#x}\nldxdw %r0, [%r1]\nldxw %r2, [%r1]\nadd %r0, %r2\nexit\n",
                                 reinterpret_cast<uint64_t>(m) + 4092));
  EXPECT_EQ(run_ok(*c), 0xababababu);
  munmap(m, 4096);
}

TEST_P(Engines, StoresOutsideRegionsFail) {
  uint64_t target = 5;
  auto e = load_text(fmt::format("mov %r0, 1\nlddw %r1, {:#x}\nstdw [%r1+0], 7\nexit\n",
                                 reinterpret_cast<uint64_t>(&target)));
  const std::string msg = run_fault(*e, FaultKind::bad_store, 3);
  EXPECT_EQ(target, 5u) << "the store happened";
  EXPECT_NE(msg.find(fmt::format("insn 3 (stdw [%r1], 7): store at {:#x} outside the program's writable memory",
                                 reinterpret_cast<uint64_t>(&target))),
            std::string::npos)
      << msg;
  // The same address as a writable static region: allowed.
  ExecOptions o;
  o.regions.push_back({reinterpret_cast<uint64_t>(&target), reinterpret_cast<uint64_t>(&target) + 8, true});
  auto w = load_text(fmt::format("mov %r0, 1\nlddw %r1, {:#x}\nstdw [%r1+0], 7\nexit\n",
                                 reinterpret_cast<uint64_t>(&target)),
                     o);
  EXPECT_EQ(run_ok(*w), 1u);
  EXPECT_EQ(target, 7u);
  // Read-only regions and one byte past a region refuse the store.
  o.regions[0].writable = false;
  auto ro = load_text(fmt::format("lddw %r1, {:#x}\nstxb [%r1], %r1\nexit\n", reinterpret_cast<uint64_t>(&target)), o);
  run_fault(*ro, FaultKind::bad_store, 2);
  o.regions[0].writable = true;
  auto past = load_text(fmt::format("lddw %r1, {:#x}\nstxw [%r1+6], %r1\nexit\n", reinterpret_cast<uint64_t>(&target)), o);
  run_fault(*past, FaultKind::bad_store, 2);
  // Below the stack and above it (through a copy of r10, so checked at run time).
  auto below = load_text("mov %r1, %r10\nstdw [%r1-4104], 1\nexit\n");
  run_fault(*below, FaultKind::bad_store, 1);
  auto above = load_text("mov %r1, %r10\nstb [%r1], 1\nexit\n");
  run_fault(*above, FaultKind::bad_store, 1);
  // The bottom of the deepest frame is still the program's stack.
  auto deep = load_text("mov %r1, %r10\nstdw [%r1-4096], 1\nldxdw %r0, [%r1-4096]\nexit\n");
  EXPECT_EQ(run_ok(*deep), 1u);
}

TEST_P(Engines, ContextWritability) {
  uint64_t ctx[2] = {3, 4};
  auto r = load_text("ldxdw %r0, [%r1+8]\nstdw [%r1+8], 9\nexit\n");
  run_fault(*r, FaultKind::bad_store, 1, ctx, sizeof ctx);
  EXPECT_EQ(ctx[1], 4u);
  ExecOptions o;
  o.ctx_writable = true;
  auto w = load_text("ldxdw %r0, [%r1+8]\nstdw [%r1+8], 9\nexit\n", o);
  EXPECT_EQ(run_ok(*w, ctx, sizeof ctx), 4u);
  EXPECT_EQ(ctx[1], 9u);
  // Past the length given: not the context any more.
  auto past = load_text("stdw [%r1+8], 9\nexit\n", o);
  run_fault(*past, FaultKind::bad_store, 0, ctx, 12);
  // A fixed context size overrides the length argument.
  o.ctx_size = 8;
  auto fixed = load_text("mov %r0, %r2\nstdw [%r1+8], 9\nexit\n", o);
  run_fault(*fixed, FaultKind::bad_store, 1, ctx, sizeof ctx);
}

TEST_P(Engines, AtomicsMustBeAligned) {
  auto s = load_text("stdw [%r10-8], 0\nmov %r1, 1\nlock add [%r10-12], %r1\nexit\n");
  const std::string msg = run_fault(*s, FaultKind::misaligned_atomic, 2);
  EXPECT_NE(msg.find("atomic at 0x"), std::string::npos) << msg;
  auto d = load_text("mov %r2, %r10\nsub %r2, 6\nmov %r1, 1\nlock add32 [%r2], %r1\nexit\n");
  run_fault(*d, FaultKind::misaligned_atomic, 3);
  // Alignment is checked first: a misaligned atomic outside any region is misaligned.
  auto both = load_text("lddw %r2, 0x1001\nlock xchg32 [%r2], %r1\nexit\n");
  run_fault(*both, FaultKind::misaligned_atomic, 2);
  auto bad = load_text("lddw %r2, 0x1000\nlock xchg32 [%r2], %r1\nexit\n");
  run_fault(*bad, FaultKind::bad_store, 2);
}

TEST_P(Engines, LoopBudget) {
  ExecOptions o;
  o.loop_budget = 100;
  // 100 backward jumps are within the budget, 101 are not.
  auto ok = load_text("mov %r0, 0\nl: add %r0, 1\njlt %r0, 101, l\nexit\n", o);
  EXPECT_EQ(run_ok(*ok), 101u);
  auto over = load_text("mov %r0, 0\nl: add %r0, 1\njlt %r0, 102, l\nexit\n", o);
  const std::string msg = run_fault(*over, FaultKind::loop_budget, 2);
  EXPECT_NE(msg.find("backward-jump budget exhausted"), std::string::npos) << msg;
  auto forever = load_text("mov %r0, 0\nja -1\nexit\n");
  run_fault(*forever, FaultKind::loop_budget, 1);
  auto forever32 = load_text("l: ja32 l\nexit\n", o);
  run_fault(*forever32, FaultKind::loop_budget, 0);
  // Unlimited when 0.
  o.loop_budget = 0;
  auto many = load_text("mov %r0, 0\nl: add %r0, 1\njlt %r0, 1000000, l\nexit\n", o);
  EXPECT_EQ(run_ok(*many), 1000000u);
}

TEST_P(Engines, NativeEntry) {
  ExecOptions o;
  o.ctx_size = 16;
  auto e = load_text("ldxdw %r0, [%r1]\nldxdw %r2, [%r1+8]\nadd %r0, %r2\nexit\n", o);
  NativeFn fn = e->native();
  if (GetParam() == EngineKind::interpreter) {
    EXPECT_EQ(fn, nullptr);
    return;
  }
  ASSERT_NE(fn, nullptr);
  uint64_t ctx[2] = {40, 2};
  EXPECT_EQ(fn(ctx), 42u);
  // Faults through the native entry are counted in the program's own status.
  auto f = load_text("stdw [%r1], 1\nmov %r0, 5\nexit\n", o);
  EXPECT_EQ(f->native()(ctx), 0u);
  EXPECT_EQ(f->native()(ctx), 0u);
  EXPECT_EQ(f->default_status().faults.load(), 2u);
  EXPECT_EQ(f->default_status().kind(), FaultKind::bad_store);
}

RunState* g_seen = nullptr;
uint64_t g_allowed = 0;
uint64_t helper_peek(uint64_t ptr, uint64_t, uint64_t, uint64_t, uint64_t) {
  g_seen = current_run();
  g_allowed = g_seen && run_allows(g_seen, ptr, 8, true) ? 1 : 0;
  return g_allowed;
}
// What a verified program would call: no run to look at (these programs are unverified).
uint64_t helper_peek_trusted(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t) { return 1; }

TEST(EbpfHelpers, NeedsRunRequiresATrustedForm) {
  // A verified program's JIT code calls trusted forms and publishes no run: a helper
  // that needs the run and has no trusted form would find none, so the table refuses it.
  HelperTable h;
  auto r = h.add(2, "peek", &helper_peek, true);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("helper 2 (peek) needs the run but has no trusted form"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(h.find(2), nullptr);
  EXPECT_TRUE(h.add(2, "peek", &helper_peek, true, {}, &helper_peek_trusted));
  ASSERT_NE(h.find(2), nullptr);
  EXPECT_EQ(h.find(2)->trusted_fn(), &helper_peek_trusted);
}

TEST_P(Engines, CurrentRunForHelpers) {
  HelperTable h;
  ASSERT_TRUE(h.add(2, "peek", &helper_peek, true, {}, &helper_peek_trusted));
  ExecOptions o;
  o.helpers = &h;
  auto e = load_text("mov %r1, %r10\nsub %r1, 8\ncall 2\nmov %r6, %r0\nlddw %r1, 16\ncall 2\n"
                     "lsh %r6, 1\nor %r0, %r6\nexit\n",
                     o);
  g_seen = nullptr;
  EXPECT_EQ(run_ok(*e), 2u);  // the stack pointer is allowed, address 16 is not
  EXPECT_NE(g_seen, nullptr);
  EXPECT_EQ(current_run(), nullptr) << "the run stays published after it ended";
}

TEST_P(Engines, FaultsDoNotLeakRunState) {
  HelperTable h;
  ASSERT_TRUE(h.add(2, "peek", &helper_peek, true, {}, &helper_peek_trusted));
  ExecOptions o;
  o.helpers = &h;
  auto e = load_text("mov %r1, 0\ncall 2\nlddw %r1, 16\nstb [%r1], 0\nexit\n", o);
  run_fault(*e, FaultKind::bad_store, 4);
  EXPECT_EQ(current_run(), nullptr);
}

TEST_P(Engines, ConcurrentRuns) {
  // One loaded program run by several threads at once: runs share nothing but the code.
  auto e = load_text("mov %r0, 0\nmov %r3, %r2\nl: stxdw [%r10-8], %r0\nldxdw %r0, [%r10-8]\nadd %r0, 1\n"
                     "jlt %r0, %r3, l\nexit\n");
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i)
        if (e->run(nullptr, 100 + t, &e->default_status()) != uint64_t(100 + t)) ++bad;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(e->default_status().faults.load(), 0u);
}

// bpf_get_func_ret (184) answers from the return slot only when the image says it is
// valid (fmod_ret and fexit programs): in an fentry program -EOPNOTSUPP, as the kernel's
// verifier makes the call there, and the destination is set to 0.
TEST_P(Engines, GetFuncRetOnlyWhereTheReturnSlotIsValid) {
  ExecOptions o;
  o.helpers = &runtime_helpers();
  const char* store = "stdw [%r10-8], 7\nmov %r2, %r10\nadd %r2, -8\ncall 184\n";
  auto rc = load_text(std::string(store) + "exit\n", o);
  auto value = load_text(std::string(store) + "ldxdw %r0, [%r10-8]\nexit\n", o);
  // ctx[-3] cookie, ctx[-2] function, ctx[-1] one argument slot; ctx[0], then ctx[1] the
  // return slot.
  uint64_t mem[6] = {0, 0, 0x1000, 1, 5, 99};
  uint64_t* ctx = &mem[4];
  EXPECT_EQ(run_ok(*rc, ctx), static_cast<uint64_t>(-EOPNOTSUPP)) << "fentry";
  // The eBPF helper writes its out word on every path (0 here): the verifier counts
  // it as written by the call (utramp_get_func_ret, the C API's, leaves it unchanged).
  EXPECT_EQ(run_ok(*value, ctx), 0u) << "0 on a failure";
  mem[3] |= utramp::abi::kCtxRetValid;
  EXPECT_EQ(run_ok(*rc, ctx), 0u) << "fexit, fmod_ret";
  EXPECT_EQ(run_ok(*value, ctx), 99u);

  // Verified, as every program outside the tests: the JIT's code calls the trusted form.
  o.ctx_kind = CtxKind::tracing;
  o.ctx_size = 16;  // the argument, then the return slot
  auto p = assemble(std::string(store) + "ldxdw %r0, [%r10-8]\nexit\n");
  ASSERT_TRUE(p) << p.error().message;
  auto proven = load(Program{"ret", "", *p}, o, GetParam());
  ASSERT_TRUE(proven) << proven.error().message;
  mem[5] = 77;
  EXPECT_EQ(run_ok(**proven, ctx), 77u) << "verified, the return slot valid";
  mem[3] &= ~utramp::abi::kCtxRetValid;
  EXPECT_EQ(run_ok(**proven, ctx), 0u) << "verified, fentry: 0 on a failure";
}

// A program that stores into a map's internals (its header, a hash map's buckets with
// their locks and its entries' links and keys, a ring buffer's positions and lock)
// fails as any bad store does, and changes nothing: a lock word set by a program would
// hang every thread that takes it. Stores into the value a lookup handed out still go
// through, and afterwards the map works, with exact counts from several threads.
TEST_P(Engines, MapInternalsAreNotWritable) {
  char path[] = "/tmp/utramp-engine-test-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  auto spec = [](const char* name, MapType t, uint32_t k, uint32_t v, uint32_t n) {
    MapSpec s;
    s.name = name;
    s.type = uint32_t(t);
    s.key_size = k;
    s.value_size = v;
    s.max_entries = n;
    return s;
  };
  auto created = MapFile::create(path, {spec("h", MapType::hash, 4, 8, 8), spec("r", MapType::ringbuf, 0, 0, 4096)});
  ASSERT_TRUE(created) << created.error().message;
  auto mf = MapFile::attach(path);  // registered: helpers accept its headers
  unlink(path);
  ASSERT_TRUE(mf) << mf.error().message;
  MapHeader* h = mf->header(0);
  ExecOptions o;
  o.helpers = &runtime_helpers();
  for (size_t i = 0; i < mf->count(); ++i) {
    auto v = mf->values(i);
    o.regions.push_back({reinterpret_cast<uint64_t>(v.data()), reinterpret_cast<uint64_t>(v.data() + v.size()), true});
  }
  const uint32_t key = 1;
  const uint64_t zero = 0;
  ASSERT_EQ(map_update(h, &key, &zero, 0), 0);

  // The value handed out by a lookup is the program's to write.
  auto lookup = [&](const char* then) {
    return fmt::format("stw [%r10-4], 1\nlddw %r1, {:#x}\nmov %r2, %r10\nadd %r2, -4\ncall 1\n{}\nmov %r0, 1\nexit\n",
                       reinterpret_cast<uint64_t>(h), then);
  };
  auto set = load_text(lookup("stdw [%r0+0], 42"), o);
  EXPECT_EQ(run_ok(*set), 1u);
  EXPECT_EQ(*static_cast<uint64_t*>(map_lookup(h, &key)), 42u);

  // Every word outside the values: refused, and nothing changed.
  auto poke = load_text("ldxdw %r2, [%r1+0]\nstw [%r2+0], 1\nmov %r0, 1\nexit\n", o);
  std::vector<std::pair<uint64_t, uint64_t>> internals;  // [lo, hi)
  for (size_t i = 0; i < mf->count(); ++i) {
    const uint64_t hdr = reinterpret_cast<uint64_t>(mf->header(i));
    internals.push_back({hdr, hdr + 256});
    auto d = mf->data(i);
    auto v = mf->values(i);
    internals.push_back({reinterpret_cast<uint64_t>(d.data()), reinterpret_cast<uint64_t>(v.data())});
    internals.push_back({reinterpret_cast<uint64_t>(v.data() + v.size()), reinterpret_cast<uint64_t>(d.data() + d.size())});
  }
  size_t tried = 0;
  for (auto [lo, hi] : internals) {
    const std::vector<uint8_t> before(reinterpret_cast<uint8_t*>(lo), reinterpret_cast<uint8_t*>(hi));
    for (uint64_t a = lo; a + 4 <= hi; a += 4, ++tried) {
      uint64_t ctx = a;
      run_fault(*poke, FaultKind::bad_store, 1, &ctx, sizeof ctx);
    }
    EXPECT_EQ(std::memcmp(before.data(), reinterpret_cast<void*>(lo), hi - lo), 0)
        << "map internals at " << std::hex << lo << " changed";
  }
  EXPECT_GT(tried, 100u);

  // Still a working map: four threads each add 1000 through the program.
  auto add = load_text(lookup("mov %r3, 1\nlock add [%r0+0], %r3"), o);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) add->run(nullptr, 0, &add->default_status());
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(add->default_status().faults.load(), 0u);
  EXPECT_EQ(*static_cast<uint64_t*>(map_lookup(h, &key)), 42u + 4000u);
  const uint32_t other = 2;
  EXPECT_EQ(map_update(h, &other, &zero, 1), 0);
  EXPECT_EQ(mf->entry_count(0), 2u);
  EXPECT_EQ(map_delete(h, &key), 0);
  EXPECT_EQ(map_lookup(h, &key), nullptr);
  void* rec = ringbuf_reserve(mf->header(1), 16);
  ASSERT_NE(rec, nullptr);
  EXPECT_TRUE(ringbuf_commit(mf->header(1), rec, false));
  EXPECT_EQ(mf->consume_ring(1, [](std::span<const uint8_t>) {}), 1u);
}

TEST_P(Engines, ProvenWithoutContext) {
  // Verified with the default options (a memory context of 0 bytes), a program is proven
  // for r1 = NULL and r2 = 0: both guards are never taken, their target is unreached
  // (ud2 in the JIT). The run starts as proven whatever ctx and length the caller gives.
  auto p = assemble("jne %r1, 0, +3\njne %r2, 0, +2\nmov %r0, 1\nexit\nmov %r0, 2\nexit\n");
  ASSERT_TRUE(p) << p.error().message;
  auto e = load(Program{"noctx", "", *p}, ExecOptions{}, GetParam());
  ASSERT_TRUE(e) << e.error().message;
  uint64_t buf[2] = {};
  EXPECT_EQ(run_ok(**e, buf, sizeof buf), 1u);
  EXPECT_EQ(run_ok(**e), 1u);
}

INSTANTIATE_TEST_SUITE_P(Both, Engines, ::testing::Values(EngineKind::interpreter, EngineKind::jit),
                         engine_param_name);

TEST(EbpfJit, CodeLivesInTheArena) {
  auto p = assemble("mov %r0, 7\nexit\n");
  ASSERT_TRUE(p);
  auto j = JitProgram::compile(Program{"seven", "", *p}, {});
  ASSERT_TRUE(j) << j.error().message;
  EXPECT_GT((*j)->code().size(), 0u);
  EXPECT_EQ((*j)->run(nullptr, 0, &(*j)->default_status()), 7u);
  // Read+exec, never writable.
  FILE* f = fopen("/proc/self/maps", "r");
  ASSERT_NE(f, nullptr);
  char line[512];
  bool found = false;
  const uint64_t a = (*j)->address();
  while (fgets(line, sizeof line, f)) {
    uint64_t lo, hi;
    char perms[5];
    if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && a >= lo && a < hi) {
      found = true;
      EXPECT_STREQ(perms, "r-xp");
    }
  }
  fclose(f);
  EXPECT_TRUE(found);
}

}  // namespace
