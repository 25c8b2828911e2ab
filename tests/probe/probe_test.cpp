// int3 and jump-optimised probes: handlers, registers, several probes at one address,
// redirection, every kind of displaced instruction, optimisation chosen and refused,
// listing, and bad input.
//
// Every test asserts what happened (results, counts, bytes), never timings. Tests that
// expect a multi-instruction window to be optimised need this process to have one
// thread when they attach: they join every thread they start.
#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <thread>

#include "flow_targets.h"
#include "patch/patcher.hpp"
#include "sites/table.hpp"
#include "probe_test_util.hpp"

namespace {

using namespace probe_test;
using utramp::probe::Manager;
using utramp::probe::State;

// Every test starts with optimisation on and nothing attached.
class Probes : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(Manager::instance().set_optimization(true)); }
  void TearDown() override {
    for (utramp_probe* p : attached_) EXPECT_EQ(utramp_probe_detach(p), 0) << last_error();
    EXPECT_TRUE(Manager::instance().list().empty());
    (void)Manager::instance().set_optimization(true);
  }
  utramp_probe* attach(void* addr, utramp_probe_handler_t pre, utramp_probe_handler_t post,
                       uint64_t cookie) {
    utramp_probe* p = utramp_probe_attach(addr, pre, post, cookie);
    EXPECT_NE(p, nullptr) << last_error();
    if (p) attached_.push_back(p);
    return p;
  }
  void detach(utramp_probe* p) {
    ASSERT_EQ(utramp_probe_detach(p), 0) << last_error();
    std::erase(attached_, p);
  }
  std::vector<utramp_probe*> attached_;
};

TEST_F(Probes, Int3ProbeCountsEveryHitAndDetachRestoresTheBytes) {
  ASSERT_TRUE(Manager::instance().set_optimization(false));
  const uint64_t a = addr_of(&pt_add);
  const auto before = bytes(a, 16);
  std::atomic<uint64_t> n{0};
  utramp_probe* p = attach(at(&pt_add), count_hit, nullptr, cookie_of(n));
  EXPECT_EQ(bytes(a, 1)[0], utramp::arch::kTrapByte);
  EXPECT_EQ(info_at(a)->state, State::int3);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(opaque(&pt_add)(i, 2), i + 2);
  EXPECT_EQ(n.load(), 100u);
  EXPECT_EQ(info_at(a)->hits, 100u);
  detach(p);
  EXPECT_EQ(bytes(a, 16), before);
  for (int i = 0; i < 10; ++i) opaque(&pt_add)(i, 2);
  EXPECT_EQ(n.load(), 100u);
}

// A caller that counts its own runs (utramp run) turns the probe's hit count off: the
// handler runs on every hit, through the int3 and through the detour, and the listing's
// hits stay 0.
TEST_F(Probes, HitsNotCountedWhenTheSpecSaysSo) {
  for (const bool optimise : {false, true}) {
    ASSERT_TRUE(Manager::instance().set_optimization(optimise));
    std::atomic<uint64_t> n{0};
    utramp::probe::ProbeSpec spec;
    spec.addr = addr_of(&pt_redzone) + 8;
    spec.pre = reinterpret_cast<utramp::probe::Handler>(&count_hit);
    spec.cookie = cookie_of(n);
    spec.count_hits = false;
    auto p = Manager::instance().attach(spec);
    ASSERT_TRUE(p) << p.error().message;
    for (int i = 0; i < 10; ++i) opaque(&pt_redzone)(i);
    EXPECT_EQ(n.load(), 10u);
    const auto all = Manager::instance().list();
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].state, optimise ? State::optimised : State::int3);
    EXPECT_EQ(all[0].hits, 0u);
    ASSERT_TRUE(Manager::instance().detach(*p));
  }
}

struct Seen {
  utramp_regs regs{};
  uint64_t below_sp = 0;  // the word at rsp-8 (pt_redzone keeps x there)
  int calls = 0;
};

int record_regs(utramp_regs* r, uint64_t cookie) {
  auto* s = reinterpret_cast<Seen*>(cookie);
  s->regs = *r;
  s->below_sp = *reinterpret_cast<const uint64_t*>(r->rsp - 8);
  ++s->calls;
  return 0;
}

TEST_F(Probes, PreHandlerSeesTheRegistersAtTheProbedInstruction) {
  for (bool optimise : {false, true}) {
    SCOPED_TRACE(optimise ? "optimised" : "int3");
    ASSERT_TRUE(Manager::instance().set_optimization(optimise));
    Seen s;
    // pt_redzone+13 is `mov ecx, 0x1000` (5 bytes): a window of one instruction.
    utramp_probe* p = attach(at(&pt_redzone, 13), record_regs, nullptr, reinterpret_cast<uint64_t>(&s));
    EXPECT_EQ(info_at(addr_of(&pt_redzone, 13))->state, optimise ? State::optimised : State::int3);
    EXPECT_EQ(opaque(&pt_redzone)(21), 42u);
    ASSERT_EQ(s.calls, 1);
    EXPECT_EQ(s.regs.rip, addr_of(&pt_redzone, 13));
    EXPECT_EQ(s.regs.rdi, 21u);
    EXPECT_EQ(s.regs.rax, 21u);
    // rsp is the function's own: its return address is on top, and x in its red zone.
    EXPECT_EQ(s.below_sp, 21u);
    detach(p);
  }
}

int set_rdi_100(utramp_regs* r, uint64_t) {
  r->rdi = 100;
  return 0;
}

TEST_F(Probes, HandlerChangesRegisters) {
  for (bool optimise : {false, true}) {
    ASSERT_TRUE(Manager::instance().set_optimization(optimise));
    // pt_redzone+5 `mov rax, rdi` (3 bytes) and +8 (5-byte NOP): a window of 2 at +5
    // could be refused; +0 `mov [rsp-8], rdi` (5 bytes) is a window of one.
    utramp_probe* p = attach(at(&pt_redzone, 0), set_rdi_100, nullptr, 0);
    EXPECT_EQ(opaque(&pt_redzone)(1), 200u);
    detach(p);
  }
}

int check_post(utramp_regs* r, uint64_t cookie) {
  auto* s = reinterpret_cast<Seen*>(cookie);
  s->regs = *r;
  ++s->calls;
  return 0;
}

TEST_F(Probes, PostHandlerRunsAfterTheInstructionAndKeepsTheInt3) {
  Seen pre, post;
  // pt_leaf+0: lea eax, [rdi+rdi*2] (runs from the slot).
  attach(at(&pt_leaf), record_regs, nullptr, reinterpret_cast<uint64_t>(&pre));
  attach(at(&pt_leaf), nullptr, check_post, reinterpret_cast<uint64_t>(&post));
  EXPECT_EQ(opaque(&pt_leaf)(7), 21);
  EXPECT_EQ(pre.calls, 1);
  ASSERT_EQ(post.calls, 1);
  EXPECT_EQ(post.regs.rax & 0xffffffff, 21u);
  EXPECT_EQ(post.regs.rip, addr_of(&pt_leaf, 3));
  auto i = info_at(addr_of(&pt_leaf));
  EXPECT_EQ(i->state, State::int3);
  EXPECT_NE(i->not_optimised.find("post-handler"), std::string::npos) << i->not_optimised;
  // Post-handlers of emulated control flow run at the destination, without a trap.
  Seen jpost;
  attach(at(&pt_jcc, 4), nullptr, check_post, reinterpret_cast<uint64_t>(&jpost));
  EXPECT_EQ(opaque(&pt_jcc)(-1), -101);
  EXPECT_EQ(jpost.regs.rip, addr_of(&pt_jcc, 10));
  EXPECT_EQ(opaque(&pt_jcc)(1), 101);
  EXPECT_EQ(jpost.regs.rip, addr_of(&pt_jcc, 6));
  EXPECT_EQ(jpost.calls, 2);
}

std::vector<int> g_order;
int order_1(utramp_regs*, uint64_t) { g_order.push_back(1); return 0; }
int order_2(utramp_regs*, uint64_t) { g_order.push_back(2); return 0; }
int order_3(utramp_regs*, uint64_t) { g_order.push_back(3); return 0; }

TEST_F(Probes, SeveralProbesShareOneAddressInAttachOrder) {
  for (bool optimise : {false, true}) {
    ASSERT_TRUE(Manager::instance().set_optimization(optimise));
    g_order.clear();
    utramp_probe* p1 = attach(at(&pt_redzone, 13), order_1, nullptr, 0);
    utramp_probe* p2 = attach(at(&pt_redzone, 13), order_2, nullptr, 0);
    utramp_probe* p3 = attach(at(&pt_redzone, 13), order_3, nullptr, 0);
    EXPECT_EQ(opaque(&pt_redzone)(1), 2u);
    EXPECT_EQ(g_order, (std::vector<int>{1, 2, 3}));
    detach(p2);
    g_order.clear();
    EXPECT_EQ(opaque(&pt_redzone)(1), 2u);
    EXPECT_EQ(g_order, (std::vector<int>{1, 3}));
    detach(p1);
    detach(p3);
  }
}

// Emulates a return from the probed function's entry with rax = 7: the kernel's
// override of a function by a kprobe.
int return_7(utramp_regs* r, uint64_t) {
  r->rax = 7;
  r->rip = *reinterpret_cast<uint64_t*>(r->rsp);
  r->rsp += 8;
  return 1;
}

// Skips the `add eax, 100` of pt_jcc's positive path and returns through the `ret`.
int skip_add(utramp_regs* r, uint64_t) {
  r->rip = addr_of(&pt_jcc, 9);
  return 1;
}

TEST_F(Probes, PreHandlerReturningNonZeroSkipsTheInstruction) {
  for (bool optimise : {false, true}) {
    SCOPED_TRACE(optimise ? "optimised" : "int3");
    ASSERT_TRUE(Manager::instance().set_optimization(optimise));
    utramp_probe* p = attach(at(&pt_redzone), return_7, nullptr, 0);
    EXPECT_EQ(info_at(addr_of(&pt_redzone))->state, optimise ? State::optimised : State::int3);
    EXPECT_EQ(opaque(&pt_redzone)(100), 7u);
    detach(p);
    EXPECT_EQ(opaque(&pt_redzone)(100), 200u);
  }
  utramp_probe* q = attach(at(&pt_jcc, 6), skip_add, nullptr, 0);
  EXPECT_EQ(opaque(&pt_jcc)(5), 5);
  EXPECT_EQ(opaque(&pt_jcc)(-5), -105);
  detach(q);
}

// Every instruction of the assembly fixtures probed at once (and with post-handlers):
// each kind of control flow emulated, each other instruction run from its slot or a
// detour, with the same results as without probes.
uint64_t symbol_size(uint64_t f) {
  auto& t = utramp::sites::SiteTable::instance();
  if (!t.find(f)) (void)t.discover();
  const utramp::sites::Site* s = t.find(f);
  return s ? s->info.size : 0;
}

void run_flow_functions(int rounds) {
  for (int i = 0; i < rounds; ++i) {
    ASSERT_EQ(opaque(&pt_leaf)(5), 15);
    ASSERT_EQ(opaque(&pt_jcc)(5), 105);
    ASSERT_EQ(opaque(&pt_jcc)(-5), -105);
    ASSERT_EQ(opaque(&pt_call)(4), 16);
    ASSERT_EQ(opaque(&pt_icall)(2), 162);
    ASSERT_EQ(opaque(&pt_switch)(0), 10);
    ASSERT_EQ(opaque(&pt_switch)(1), 11);
    ASSERT_EQ(opaque(&pt_switch)(2), 12);
    ASSERT_EQ(opaque(&pt_switch)(9), -1);
    ASSERT_EQ(opaque(&pt_loop)(10), 55u);
    ASSERT_EQ(opaque(&pt_loop)(0), 0u);
    ASSERT_EQ(opaque(&pt_retn)(41), 42u);
    ASSERT_EQ(opaque(&pt_riprel)(3), 8u);
    ASSERT_EQ(pt_data2, 3u);
    ASSERT_EQ(opaque(&pt_redzone)(9), 18u);
    ASSERT_EQ(opaque(&pt_branch_into)(4), 12);
    ASSERT_EQ(opaque(&pt_multi)(3), 30);
    ASSERT_EQ(opaque(&pt_window_call)(3), 10);
    ASSERT_EQ(opaque(&pt_getpid)(), getpid());
    ASSERT_EQ(opaque(&pt_pushf)() & 0x44, 0x44u);  // ZF and PF, as `xor eax, eax` left them
  }
}

TEST_F(Probes, EveryInstructionOfTheFlowFixturesWithTheSameResults) {
  const std::vector<uint64_t> fns = {
      addr_of(&pt_leaf), addr_of(&pt_jcc), addr_of(&pt_call), addr_of(&pt_icall),
      addr_of(&pt_switch), addr_of(&pt_loop), addr_of(&pt_retn), addr_of(&pt_retn_callee),
      addr_of(&pt_riprel), addr_of(&pt_redzone), addr_of(&pt_branch_into), addr_of(&pt_multi),
      addr_of(&pt_window_call), addr_of(&pt_getpid), addr_of(&pt_pushf)};
  run_flow_functions(1);
  for (int pass = 0; pass < 3; ++pass) {
    SCOPED_TRACE(pass == 0 ? "pre, optimised where possible" : pass == 1 ? "pre, int3" : "pre+post");
    ASSERT_TRUE(Manager::instance().set_optimization(pass == 0));
    std::vector<std::atomic<uint64_t>> pre(512), post(512);
    std::vector<utramp::probe::ProbeSpec> specs;
    std::map<uint64_t, size_t> index;
    for (uint64_t f : fns) {
      const uint64_t size = symbol_size(f);
      ASSERT_GT(size, 0u);
      for (uint32_t off : boundaries(f, size)) {
        const uint64_t a = f + off;
        auto st = Manager::instance().check(a);
        if (!st) {  // the ud2 after pt_jcc's jmp, never executed
          EXPECT_NE(st.error().message.find("raises a trap"), std::string::npos) << st.error().message;
          continue;
        }
        index[a] = specs.size();
        specs.push_back({a, reinterpret_cast<utramp::probe::Handler>(&count_hit), nullptr,
                         cookie_of(pre[specs.size()])});
      }
    }
    ASSERT_GT(specs.size(), 80u);
    auto probes = Manager::instance().attach_batch(specs);
    ASSERT_TRUE(probes) << probes.error().message;
    std::vector<utramp::probe::Probe*> posts;
    if (pass == 2) {
      for (size_t k = 0; k < specs.size(); ++k) {
        auto q = Manager::instance().attach({specs[k].addr, nullptr,
                                             reinterpret_cast<utramp::probe::Handler>(&count_hit),
                                             cookie_of(post[k])});
        ASSERT_TRUE(q) << q.error().message;
        posts.push_back(*q);
      }
    }
    size_t optimised = 0;
    for (auto& i : Manager::instance().list()) optimised += i.state == State::optimised;
    if (pass == 0) EXPECT_GT(optimised, 5u);
    else EXPECT_EQ(optimised, 0u);
    run_flow_functions(3);
    auto count = [&](uint64_t a) { return pre[index.at(a)].load(); };
    // pt_leaf: 1 direct call, 1 from pt_call, 4 from pt_icall, 1 from pt_window_call.
    EXPECT_EQ(count(addr_of(&pt_leaf)), 21u);
    EXPECT_EQ(count(addr_of(&pt_jcc)), 6u);
    EXPECT_EQ(count(addr_of(&pt_jcc, 6)), 3u);   // x > 0
    EXPECT_EQ(count(addr_of(&pt_jcc, 10)), 3u);  // x <= 0
    EXPECT_EQ(count(addr_of(&pt_switch)), 12u);
    EXPECT_EQ(count(addr_of(&pt_loop, 7)), 30u);  // the loop body, n = 10
    EXPECT_EQ(count(addr_of(&pt_loop, 12)), 6u);  // the ret
    EXPECT_EQ(count(addr_of(&pt_retn_callee, 9)), 3u);
    EXPECT_EQ(count(addr_of(&pt_getpid, 5)), 3u);
    if (pass == 2) {
      for (size_t k = 0; k < specs.size(); ++k)
        EXPECT_EQ(post[k].load(), pre[k].load()) << "at " << std::hex << specs[k].addr;
    }
    ASSERT_TRUE(Manager::instance().detach_batch(*probes));
    ASSERT_TRUE(Manager::instance().detach_batch(posts));
    run_flow_functions(1);
  }
}

TEST_F(Probes, OptimisedWhereTheBytesAllowItIncludingSeveralInstructions) {
  std::atomic<uint64_t> a{0}, b{0}, c{0};
  attach(at(&pt_redzone, 8), count_hit, nullptr, cookie_of(a));  // 5-byte NOP
  attach(at(&pt_multi), count_hit, nullptr, cookie_of(b));       // mov (2) + add (3)
  attach(at(&pt_window_call), count_hit, nullptr, cookie_of(c)); // push (1) + call (5)
  for (uint64_t x : {addr_of(&pt_redzone, 8), addr_of(&pt_multi), addr_of(&pt_window_call)}) {
    auto i = info_at(x);
    ASSERT_TRUE(i);
    EXPECT_EQ(i->state, State::optimised) << i->symbol << ": " << i->not_optimised;
  }
  EXPECT_EQ(bytes(addr_of(&pt_multi), 1)[0], 0xe9);  // jmp rel32
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(opaque(&pt_redzone)(i), 2u * i);
    ASSERT_EQ(opaque(&pt_multi)(i), (i + 7) * i);
    ASSERT_EQ(opaque(&pt_window_call)(i), 3 * i + 1);
  }
  EXPECT_EQ(a.load(), 50u);
  EXPECT_EQ(b.load(), 50u);
  EXPECT_EQ(c.load(), 50u);
}

TEST_F(Probes, OptimisationRefusedWhereABranchTargetsThePatchedBytes) {
  std::atomic<uint64_t> n{0};
  attach(at(&pt_branch_into), count_hit, nullptr, cookie_of(n));
  auto i = info_at(addr_of(&pt_branch_into));
  ASSERT_TRUE(i);
  EXPECT_EQ(i->state, State::int3);
  EXPECT_NE(i->not_optimised.find("branch targets pt_branch_into+0x2"), std::string::npos)
      << i->not_optimised;
  EXPECT_EQ(opaque(&pt_branch_into)(5), 15);
  EXPECT_EQ(n.load(), 1u);
  // A jump table: the indirect jump could target anything in the function.
  std::atomic<uint64_t> m{0};
  attach(at(&pt_switch, 5), count_hit, nullptr, cookie_of(m));  // mov (2) + lea (7)
  i = info_at(addr_of(&pt_switch, 5));
  EXPECT_EQ(i->state, State::int3);
  EXPECT_NE(i->not_optimised.find("indirect jump"), std::string::npos) << i->not_optimised;
  EXPECT_EQ(opaque(&pt_switch)(1), 11);
  EXPECT_EQ(m.load(), 1u);
}

TEST_F(Probes, AProbeInsideAWindowDeoptimisesItAndLeavingReoptimises) {
  std::atomic<uint64_t> a{0}, b{0};
  attach(at(&pt_multi), count_hit, nullptr, cookie_of(a));
  ASSERT_EQ(info_at(addr_of(&pt_multi))->state, State::optimised);
  utramp_probe* inner = attach(at(&pt_multi, 2), count_hit, nullptr, cookie_of(b));
  auto i = info_at(addr_of(&pt_multi));
  EXPECT_EQ(i->state, State::int3);
  EXPECT_NE(i->not_optimised.find("pt_multi+0x2"), std::string::npos) << i->not_optimised;
  EXPECT_EQ(opaque(&pt_multi)(2), 18);
  EXPECT_EQ(a.load(), 1u);
  EXPECT_EQ(b.load(), 1u);
  detach(inner);
  EXPECT_EQ(info_at(addr_of(&pt_multi))->state, State::optimised);
  EXPECT_EQ(opaque(&pt_multi)(2), 18);
  EXPECT_EQ(a.load(), 2u);
  EXPECT_EQ(b.load(), 1u);
}

TEST_F(Probes, MultiInstructionWindowsWaitForASingleThread) {
  std::atomic<bool> stop{false};
  std::thread t([&] {
    while (!stop.load()) opaque(&pt_other)(1);
  });
  std::atomic<uint64_t> a{0};
  utramp_probe* p = attach(at(&pt_multi), count_hit, nullptr, cookie_of(a));
  auto i = info_at(addr_of(&pt_multi));
  stop = true;
  t.join();
  EXPECT_EQ(i->state, State::int3);
  EXPECT_NE(i->not_optimised.find("other threads"), std::string::npos) << i->not_optimised;
  EXPECT_EQ(opaque(&pt_multi)(1), 8);
  detach(p);
}

TEST_F(Probes, ListingShowsAddressSymbolStateHitsAndMisses) {
  std::atomic<uint64_t> n{0};
  attach(at(&pt_redzone, 8), count_hit, nullptr, cookie_of(n));
  attach(at(&pt_jcc, 4), count_hit, count_hit, cookie_of(n));  // a post-handler: int3
  opaque(&pt_redzone)(1);
  opaque(&pt_jcc)(1);
  opaque(&pt_jcc)(1);
  const auto all = Manager::instance().list();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].symbol, "pt_jcc+0x4");  // by address: pt_jcc comes first in the fixture
  EXPECT_EQ(all[0].state, State::int3);
  EXPECT_EQ(all[0].hits, 2u);
  EXPECT_TRUE(all[0].pre);
  EXPECT_TRUE(all[0].post);
  EXPECT_EQ(all[1].symbol, "pt_redzone+0x8");
  EXPECT_EQ(all[1].state, State::optimised);
  EXPECT_EQ(all[1].hits, 1u);
  const std::string text = utramp::probe::format_listing(all);
  EXPECT_NE(text.find("pt_redzone+0x8"), std::string::npos) << text;
  EXPECT_NE(text.find("optimised"), std::string::npos) << text;
  EXPECT_NE(text.find("int3"), std::string::npos) << text;
}

// A handler that calls probed code: the nested hit runs no handler and counts a miss.
std::atomic<uint64_t> g_outer{0};
int call_probed(utramp_regs*, uint64_t) {
  g_outer.fetch_add(1);
  opaque(&pt_sub)(5, 3);
  return 0;
}

TEST_F(Probes, AHitInsideAHandlerIsAMiss) {
  for (bool optimise : {false, true}) {
    ASSERT_TRUE(Manager::instance().set_optimization(optimise));
    std::atomic<uint64_t> inner{0};
    g_outer = 0;
    utramp_probe* a = attach(at(&pt_redzone, 8), call_probed, nullptr, 0);
    utramp_probe* b = attach(at(&pt_sub), count_hit, nullptr, cookie_of(inner));
    EXPECT_EQ(opaque(&pt_redzone)(2), 4u);
    EXPECT_EQ(g_outer.load(), 1u);
    EXPECT_EQ(inner.load(), 0u);
    EXPECT_EQ(info_at(addr_of(&pt_sub))->misses, 1u);
    EXPECT_EQ(opaque(&pt_sub)(5, 3), 2);
    EXPECT_EQ(inner.load(), 1u);
    detach(a);
    detach(b);
  }
}

// A handler using vector registers, called from a detour while the probed code keeps
// live values in xmm registers: they survive (the detour's dispatch saves them).
int vector_handler(utramp_regs*, uint64_t cookie) {
  volatile double x = 1.0;
  double acc = 0;
  for (int i = 0; i < 8; ++i) acc += x * i;
  *reinterpret_cast<double*>(cookie) = acc;
  return 0;
}

TEST_F(Probes, VectorStateSurvivesAHandlerThatUsesIt) {
  double v[64];
  for (int i = 0; i < 64; ++i) v[i] = i * 0.25;
  const double want = opaque(&pt_fsum)(v, 64);
  double sink = 0;
  // Every instruction of pt_fsum's loop.
  const auto offs = boundaries(addr_of(&pt_fsum), 96);
  std::vector<utramp_probe*> ps;
  for (uint32_t off : offs) {
    if (!Manager::instance().check(addr_of(&pt_fsum, off))) continue;
    ps.push_back(attach(at(&pt_fsum, off), vector_handler, nullptr, reinterpret_cast<uint64_t>(&sink)));
  }
  ASSERT_FALSE(ps.empty());
  size_t optimised = 0;
  for (auto& i : Manager::instance().list()) optimised += i.state == State::optimised;
  EXPECT_GT(optimised, 0u) << "no detour: the vector state was saved by the kernel only";
  EXPECT_EQ(opaque(&pt_fsum)(v, 64), want);
  EXPECT_EQ(sink, 28.0);
}

// A handler that calls through a pointer (as utramp run's uprobe handler calls a JIT-ed
// program) is proven to touch only general-purpose registers when the probe names where
// such calls go (ProbeSpec::handler_calls) and what they reach touches none: then no
// vector state is saved around it, and the probed code's live xmm values survive all
// the same. A callee using vector registers, or no handler_calls, fails the proof.
#if defined(__GNUC__)  // clang too (since 14)
#define GPRS_ONLY __attribute__((target("general-regs-only"), noinline, no_sanitize("address", "undefined")))
#else
#define GPRS_ONLY __attribute__((noinline))
#endif
uint64_t g_gprs_calls = 0;  // __atomic builtins: std::atomic's always_inline members are not general-regs-only
GPRS_ONLY void callee_gprs(uint64_t) { __atomic_fetch_add(&g_gprs_calls, 1, __ATOMIC_RELAXED); }
__attribute__((noinline)) void callee_vector(uint64_t cookie) {
  volatile double x = 1.0;
  *reinterpret_cast<volatile double*>(cookie) = x * 3.0;
}
void (*volatile g_callee)(uint64_t) = callee_gprs;
GPRS_ONLY int pointer_call_handler(utramp::arch::PtRegs*, uint64_t cookie) {
  g_callee(cookie);
  return 0;
}

TEST_F(Probes, AHandlersPointerCallIsFollowedToWhereTheProbeSaysItGoes) {
  const uint64_t gprs = reinterpret_cast<uint64_t>(&callee_gprs), vec = reinterpret_cast<uint64_t>(&callee_vector);
  double sink = 0;
  auto proven = [&](std::vector<uint64_t> calls) {
    utramp::probe::ProbeSpec spec{addr_of(&pt_fsum), pointer_call_handler, nullptr, reinterpret_cast<uint64_t>(&sink),
                                  false, std::move(calls)};
    auto b = Manager::instance().attach_batch(std::span(&spec, 1));
    EXPECT_TRUE(b.ok()) << b.error().message;
    if (!b.ok()) return false;
    bool gprs_only = false;
    for (auto& i : Manager::instance().list())
      if (i.addr == spec.addr) gprs_only = i.pre_gprs_only;
    EXPECT_TRUE(Manager::instance().detach(b->front()).ok());
    return gprs_only;
  };
  EXPECT_TRUE(proven({gprs}));
  EXPECT_FALSE(proven({gprs, vec}));
  EXPECT_FALSE(proven({}));

  // Proven: live xmm values of pt_fsum's loop survive hits at every instruction of it.
  double v[64];
  for (int i = 0; i < 64; ++i) v[i] = i * 0.25;
  const double want = opaque(&pt_fsum)(v, 64);
  std::vector<utramp::probe::Probe*> ps;
  size_t proven_gprs = 0;
  for (uint32_t off : boundaries(addr_of(&pt_fsum), 96)) {
    if (!Manager::instance().check(addr_of(&pt_fsum, off))) continue;
    utramp::probe::ProbeSpec spec{addr_of(&pt_fsum, off), pointer_call_handler, nullptr, 0, false, {gprs}};
    auto b = Manager::instance().attach_batch(std::span(&spec, 1));
    ASSERT_TRUE(b.ok()) << b.error().message;
    ps.push_back(b->front());
  }
  ASSERT_FALSE(ps.empty());
  for (auto& i : Manager::instance().list()) proven_gprs += i.pre_gprs_only && i.state == State::optimised;
  EXPECT_GT(proven_gprs, 0u) << "no detour without a vector-state save";
  const uint64_t before = __atomic_load_n(&g_gprs_calls, __ATOMIC_RELAXED);
  EXPECT_EQ(opaque(&pt_fsum)(v, 64), want);
  EXPECT_GT(__atomic_load_n(&g_gprs_calls, __ATOMIC_RELAXED), before);
  for (auto* p : ps) EXPECT_TRUE(Manager::instance().detach(p).ok());
}

TEST_F(Probes, ASystemCallRunsFromTheSlot) {
  std::atomic<uint64_t> n{0};
  attach(at(&pt_getpid, 5), count_hit, nullptr, cookie_of(n));
  EXPECT_EQ(opaque(&pt_getpid)(), getpid());
  EXPECT_EQ(n.load(), 1u);
}

// ---- bad input ---------------------------------------------------------------------

void expect_refused(void* addr, int err, const std::string& says) {
  errno = 0;
  utramp_probe* p = utramp_probe_attach(addr, count_hit, nullptr, 0);
  EXPECT_EQ(p, nullptr);
  if (p) utramp_probe_detach(p);
  EXPECT_EQ(errno, err) << last_error();
  EXPECT_NE(last_error().find(says), std::string::npos) << last_error();
}

// The functions the patcher itself calls (its writes through /proc/self/mem, its
// allocations) take probes, int3 and jump-optimised: a batch that patches other code
// while they are probed runs them through the probes (the patcher's own hits count
// too: the probe layer runs every handler; agent/bpf.cpp's skips utramp's own calls),
// and every call of the program's reaches the handler. (They were refused as "used by
// the patcher itself".)
TEST_F(Probes, FunctionsThePatcherCallsTakeProbes) {
  // Under AddressSanitizer malloc and pwrite are its interceptors (a sanitizer runtime:
  // refused, and the program's calls never reach the C library's).
  if (dlsym(RTLD_DEFAULT, "__asan_init")) GTEST_SKIP() << "malloc and pwrite are AddressSanitizer's here";
  for (const bool optimise : {false, true}) {
    SCOPED_TRACE(optimise ? "optimised" : "int3");
    ASSERT_TRUE(Manager::instance().set_optimization(optimise));
    std::atomic<uint64_t> writes{0}, allocs{0}, adds{0};
    void* pw = dlsym(RTLD_DEFAULT, "pwrite");
    void* ma = dlsym(RTLD_DEFAULT, "malloc");
    ASSERT_NE(pw, nullptr);
    ASSERT_NE(ma, nullptr);
    utramp_probe* a = attach(pw, count_hit, nullptr, cookie_of(writes));
    utramp_probe* b = attach(ma, count_hit, nullptr, cookie_of(allocs));
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    // A batch of the patcher's (another probe) runs while both are armed.
    const uint64_t w0 = writes.load();
    utramp_probe* c = attach(at(&pt_add), count_hit, nullptr, cookie_of(adds));
    EXPECT_GT(writes.load(), w0);  // its writes went through the probed pwrite
    EXPECT_EQ(opaque(&pt_add)(2, 3), 5);
    const int fd = ::open("/dev/null", O_WRONLY);
    ASSERT_GE(fd, 0);
    const uint64_t w1 = writes.load(), m1 = allocs.load();
    for (int i = 0; i < 7; ++i) ASSERT_EQ(pwrite(fd, "x", 1, 0), 1);
    for (int i = 0; i < 5; ++i) {
      void* volatile m = malloc(100 + static_cast<size_t>(i));
      free(m);
    }
    ::close(fd);
    EXPECT_EQ(writes.load() - w1, 7u);
    EXPECT_GE(allocs.load() - m1, 5u);
    EXPECT_EQ(adds.load(), 1u);
    detach(c);
    detach(b);
    detach(a);
  }
}

TEST_F(Probes, BadInputIsRefusedWithTheReasonAndChangesNothing) {
  const auto riprel = bytes(addr_of(&pt_riprel), 24);
  expect_refused(at(&pt_riprel, 1), EINVAL, "inside the instruction");
  expect_refused(at(&pt_riprel, 3), EINVAL, "pt_riprel+0x3");
  EXPECT_EQ(bytes(addr_of(&pt_riprel), 24), riprel);
  expect_refused(reinterpret_cast<void*>(&utramp_version), EINVAL, "utramp's own code");
  expect_refused(&pt_data, EFAULT, "not executable");
  expect_refused(reinterpret_cast<void*>(16), ENOENT, "not mapped");
  expect_refused(at(&pt_traps, 1), EOPNOTSUPP, "raises a trap");
  expect_refused(at(&pt_traps, 3), EOPNOTSUPP, "raises a trap");
  // The signal return trampoline every probe hit returns through.
  struct sigaction sa;
  ASSERT_EQ(sigaction(SIGTRAP, nullptr, &sa), 0);
  ASSERT_NE(sa.sa_restorer, nullptr);
  expect_refused(reinterpret_cast<void*>(sa.sa_restorer), EINVAL, "__restore_rt");
  errno = 0;
  EXPECT_EQ(utramp_probe_attach(at(&pt_add), nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(utramp_probe_attach_name("pt_add", 1000, count_hit, nullptr, 0), nullptr);
  EXPECT_EQ(errno, ERANGE) << last_error();
  EXPECT_EQ(utramp_probe_attach_name("no_such_function_xyz", 0, count_hit, nullptr, 0), nullptr);
  EXPECT_EQ(errno, ENOENT) << last_error();
  // A detached probe is not attached any more.
  utramp_probe* p = utramp_probe_attach(at(&pt_add), count_hit, nullptr, 0);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(utramp_probe_detach(p), 0);
  EXPECT_EQ(utramp_probe_detach(p), -ENOENT);
}

TEST_F(Probes, ACodeChangeBySomeoneElseIsRefused) {
  // Someone else's breakpoint on pt_sub's first instruction, written with the patcher.
  const uint64_t a = addr_of(&pt_sub);
  const std::vector<uint8_t> orig = bytes(a, 1);
  utramp::patch::PatchOp op{a, orig, {utramp::arch::kTrapByte}, {}, "pt_sub"};
  ASSERT_TRUE(utramp::patch::apply(std::span(&op, 1)));
  errno = 0;
  EXPECT_EQ(utramp_probe_attach(at(&pt_sub), count_hit, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EILSEQ) << last_error();
  EXPECT_NE(last_error().find("someone else changed"), std::string::npos) << last_error();
  EXPECT_EQ(bytes(a, 1)[0], utramp::arch::kTrapByte);
  std::swap(op.expected, op.replacement);
  ASSERT_TRUE(utramp::patch::apply(std::span(&op, 1)));
}

TEST_F(Probes, ProbesKeepWorkingInAForkedChildWhichMayDetachThem) {
  std::atomic<uint64_t> n{0};
  utramp_probe* a = attach(at(&pt_jcc, 6), count_hit, nullptr, cookie_of(n));
  utramp_probe* b = attach(at(&pt_redzone, 8), count_hit, nullptr, cookie_of(n));
  const pid_t pid = fork();
  if (pid == 0) {
    bool ok = opaque(&pt_jcc)(1) == 101 && opaque(&pt_redzone)(2) == 4 && n.load() == 2;
    ok = ok && utramp_probe_detach(a) == 0 && utramp_probe_detach(b) == 0;
    ok = ok && opaque(&pt_jcc)(1) == 101 && n.load() == 2;
    ok = ok && bytes(addr_of(&pt_jcc, 6), 1)[0] == 0x83;  // add eax, 100
    _exit(ok ? 42 : 1);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 42);
  // The parent's probes are untouched by the child's detach.
  EXPECT_EQ(opaque(&pt_jcc)(1), 101);
  EXPECT_EQ(n.load(), 1u);
}

TEST_F(Probes, AttachByName) {
  std::atomic<uint64_t> n{0};
  utramp_probe* p = utramp_probe_attach_name("pt_jcc", 6, count_hit, nullptr, cookie_of(n));
  ASSERT_NE(p, nullptr) << last_error();
  attached_.push_back(p);
  EXPECT_EQ(opaque(&pt_jcc)(1), 101);
  EXPECT_EQ(opaque(&pt_jcc)(-1), -101);
  EXPECT_EQ(n.load(), 1u);
  EXPECT_EQ(info_at(addr_of(&pt_jcc, 6))->symbol, "pt_jcc+0x6");
}

}  // namespace

namespace {

// A thread that blocks SIGTRAP with the raw system call (nothing in libc sees it) and
// then reaches an int3 is not handed a signal: the kernel ends the whole process. So an
// int3 probe is refused while such a thread runs, naming it, and allowed once it
// unblocks. In a child process: without the refusal the child dies of SIGTRAP, and the
// test says so instead of dying with it.
int count_regs_hit(utramp::arch::PtRegs*, uint64_t cookie) {
  reinterpret_cast<std::atomic<uint64_t>*>(cookie)->fetch_add(1, std::memory_order_relaxed);
  return 0;
}

TEST(ProbeSigtrap, Int3RefusedWhileAThreadKeepsSigtrapBlocked) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<int> step{0};
    std::atomic<long> tid{0};
    std::thread blocker([&] {
      const uint64_t trap = uint64_t{1} << (SIGTRAP - 1);
      syscall(SYS_rt_sigprocmask, SIG_BLOCK, &trap, nullptr, sizeof trap);
      tid = static_cast<long>(gettid());
      step = 1;
      while (step.load() < 2) usleep(1000);
      (void)opaque(&pt_other)(1);  // an armed int3 here ends the process
      syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, &trap, nullptr, sizeof trap);
      step = 3;
      while (step.load() < 4) usleep(1000);
    });
    while (step.load() < 1) usleep(1000);
    auto& m = Manager::instance();
    std::atomic<uint64_t> hits{0};
    utramp::probe::ProbeSpec spec;
    spec.addr = addr_of(&pt_other);
    spec.pre = count_regs_hit;
    spec.cookie = cookie_of(hits);
    spec.keep_int3 = true;
    auto refused = m.attach(spec);
    int code = 0;
    if (refused) {
      fprintf(stderr, "attached while thread %ld keeps SIGTRAP blocked\n", tid.load());
      code = 10;
    } else if (refused.error().message.find(fmt::format("thread {} (", tid.load())) == std::string::npos ||
               refused.error().message.find("SIGTRAP blocked") == std::string::npos) {
      fprintf(stderr, "refused without naming thread %ld: %s\n", tid.load(), refused.error().message.c_str());
      code = 11;
    }
    step = 2;
    while (step.load() < 3) usleep(1000);
    // Unblocked now: the probe goes in, and traps as usual.
    auto p = m.attach(spec);
    if (!p) {
      fprintf(stderr, "refused once no thread blocks SIGTRAP: %s\n", p.error().message.c_str());
      if (!code) code = 12;
    } else {
      (void)opaque(&pt_other)(2);
      if (hits.load() != 1 && !code) code = 13;
      (void)m.detach(*p);
    }
    step = 4;
    blocker.join();
    _exit(code);
  }
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  ASSERT_FALSE(WIFSIGNALED(st)) << "the child was killed by signal " << WTERMSIG(st)
                                << " (SIGTRAP is " << SIGTRAP << ")";
  EXPECT_EQ(WEXITSTATUS(st), 0) << "see the child's message above";
}

}  // namespace
