// More traced functions than thread counter slots (tramp/threads.hpp): each trampoline
// guards its stub window with a counter slot and each image that calls the original
// with another, and a tracer of every function of a large program (or of libc, with
// `record --libs`) needs thousands. Once every slot is taken, new owners share one: a
// thread's count then covers all of its owners, so reclamation waits for all of them
// (later, never earlier). Attach fexit to 3000 functions, call them from two threads,
// detach, and attach again.
#include <gtest/gtest.h>
#include <malloc.h>
#include <utramp/utramp.h>

#include <atomic>
#include <thread>
#include <vector>

#include "os/maps.hpp"
#include "os/text_writer.hpp"
#include "patch/patcher.hpp"
#include "tramp/trampoline.hpp"
#include "tramp_test_util.hpp"  // UTRAMP_TEST_ASAN

extern "C" long (*const mf_table[3000])(long);

namespace {

constexpr size_t kFuncs = 3000;
std::atomic<uint64_t> g_runs{0}, g_sum{0};

uint64_t count_exit(uint64_t* ctx) {
  g_runs.fetch_add(1, std::memory_order_relaxed);
  g_sum.fetch_add(ctx[1], std::memory_order_relaxed);  // the return value
  return 0;
}

// Calls every function once; the sum of their results.
uint64_t call_all() {
  uint64_t s = 0;
  for (size_t i = 0; i < kFuncs; ++i) s += static_cast<uint64_t>(mf_table[i](static_cast<long>(i)));
  return s;
}

std::vector<utramp_link*> attach_all() {
  UTRAMP_OPTS(utramp_attach_opts, o, .signature = "i64 -> i64");
  std::vector<utramp_attach_req> reqs(kFuncs);
  for (size_t i = 0; i < kFuncs; ++i)
    reqs[i] = {reinterpret_cast<void*>(mf_table[i]), UTRAMP_FEXIT, &count_exit, &o, nullptr, 0};
  const int made = utramp_attach_batch(reqs.data(), reqs.size());
  EXPECT_EQ(made, static_cast<int>(kFuncs)) << utramp_last_error();
  std::vector<utramp_link*> links;
  for (const auto& r : reqs)
    if (r.link) links.push_back(r.link);
  return links;
}

// An attach of many functions stages its stubs' and images' code straight into the
// executable arena and seals it once (os::ExecArena::stage): the only writes through
// /proc/self/mem are the patcher's, to the sites and the stubs' hops (the code went
// that way, 1.1 MB for 1,000 functions of a tracer, from copies on the heap). In a
// fresh process (ctest runs each test in one of its own; it is also the first of this
// file), every stub and image is new: a block freed by an earlier detach, in a page
// already sealed, is written through /proc/self/mem, as it must be.
TEST(TrampMany, AttachManyWritesNoCodeThroughProcSelfMem) {
  const utramp::os::TextWriteCount before = utramp::os::text_write_count();
  const utramp::patch::PatchStats patched = utramp::patch::stats();
  auto links = attach_all();
  ASSERT_EQ(links.size(), kFuncs);
  const utramp::os::TextWriteCount after = utramp::os::text_write_count();
  const utramp::patch::PatchStats patched_after = utramp::patch::stats();
  EXPECT_GT(patched_after.writes, patched.writes);
  EXPECT_EQ(after.writes - before.writes, patched_after.writes - patched.writes)
      << "code went through /proc/self/mem besides the patcher's writes";
  auto maps = utramp::os::read_maps();
  ASSERT_TRUE(maps.ok()) << maps.error().message;
  for (const auto& m : *maps) EXPECT_FALSE(m.w && m.x) << std::hex << m.start << " " << m.path;
  g_runs = 0;
  g_sum = 0;
  const uint64_t sum = call_all();
  EXPECT_EQ(g_runs.load(), kFuncs);
  EXPECT_EQ(g_sum.load(), sum);
  for (utramp_link* l : links) ASSERT_EQ(utramp_link_detach(l), 0) << utramp_last_error();
}

// What an attach keeps on the heap per function: its trampoline, link, program and
// image records, not a copy of the stub's code (staged into the arena, the heap's copy
// is freed: a tracer of 1,000 functions kept 222 KB of them; its capacity stayed after
// `code = {}`, which empties a vector without freeing it). Measured as malloc's bytes in
// use across the first attach of every function, with the links detached after.
TEST(TrampMany, AnAttachKeepsNoCopyOfTheStubsCodeOnTheHeap) {
#ifdef UTRAMP_TEST_ASAN
  GTEST_SKIP() << "AddressSanitizer's allocator: mallinfo2() does not count it";
#endif
  const size_t before = mallinfo2().uordblks;
  auto links = attach_all();
  ASSERT_EQ(links.size(), kFuncs);
  const size_t after = mallinfo2().uordblks;
  for (utramp_link* l : links) ASSERT_EQ(utramp_link_detach(l), 0) << utramp_last_error();
  const size_t per_function = (after - before) / kFuncs;
  RecordProperty("heap_bytes_per_function", static_cast<int>(per_function));
  // 2,486 bytes per function here (an fexit image with its unwind and debugger records);
  // 2,726 while the stub's code stayed.
  EXPECT_LT(per_function, 2600u) << "bytes in use per attached function";
}

TEST(TrampMany, MoreFunctionsThanCounterSlots) {
  for (int round = 0; round < 2; ++round) {
    auto links = attach_all();
    ASSERT_EQ(links.size(), kFuncs) << "round " << round;
    g_runs = 0;
    g_sum = 0;
    uint64_t expect = 0;
    std::thread other([&] { expect = call_all(); });
    const uint64_t mine = call_all();
    other.join();
    EXPECT_EQ(mine, expect);
    EXPECT_EQ(g_runs.load(), 2 * kFuncs) << "round " << round;
    EXPECT_EQ(g_sum.load(), 2 * mine) << "round " << round;
    for (utramp_link* l : links) ASSERT_EQ(utramp_link_detach(l), 0) << utramp_last_error();
    g_runs = 0;
    call_all();
    EXPECT_EQ(g_runs.load(), 0u) << "a program ran after its detach";
  }
}

std::atomic<uint64_t> g_entries{0};
uint64_t count_entry(uint64_t*) {
  g_entries.fetch_add(1, std::memory_order_relaxed);
  return 0;
}

// detach_many takes every link of 3000 functions away in a constant number of patch
// batches (new images published together: hops, sites, hops), while a thread calls
// them all and checks their results; a link named that is not live gets its own error
// and does not stop the others; afterwards no program runs.
TEST(TrampMany, DetachManyIsOneBatchForAllWhileAThreadCalls) {
  namespace ut = utramp::tramp;
  auto& m = ut::Manager::instance();
  const uint64_t expect = call_all();
  std::vector<ut::Manager::AttachRequest> reqs;
  for (size_t i = 0; i < kFuncs; ++i)
    reqs.push_back({reinterpret_cast<uint64_t>(mf_table[i]), ut::AttachType::fentry,
                    reinterpret_cast<uint64_t>(&count_entry), {}});
  std::vector<ut::Link*> links;
  for (auto& r : m.attach_many(reqs)) {
    ASSERT_TRUE(r) << r.error().message;
    links.push_back(*r);
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> wrong{0}, rounds{0};
  std::thread caller([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      if (call_all() != expect) ++wrong;
      ++rounds;
    }
  });
  while (g_entries.load() < kFuncs) std::this_thread::yield();  // the programs run

  std::vector<ut::Link*> req = links;
  req.push_back(links.front());  // named twice: detached once, the second is refused
  const utramp::patch::PatchStats before = utramp::patch::stats();
  auto res = m.detach_many(req);
  const utramp::patch::PatchStats after = utramp::patch::stats();
  ASSERT_EQ(res.size(), req.size());
  for (size_t i = 0; i < links.size(); ++i) EXPECT_TRUE(res[i]) << i << ": " << res[i].error().message;
  ASSERT_FALSE(res.back());
  EXPECT_EQ(res.back().error().code, utramp::Errc::not_found);
  // Hops before the sites, the sites, hops after; a fourth only if a thread stayed in a
  // retired image past detach's budget (its calls of the programs disabled, in one batch).
  EXPECT_LE(after.batches - before.batches, 4u) << "detach_many patched in many batches";
  EXPECT_GE(after.ops - before.ops, kFuncs) << "every site goes back to its NOP";

  const uint64_t r0 = rounds.load();
  while (rounds.load() < r0 + 2) std::this_thread::yield();  // calls after the detach
  stop = true;
  caller.join();
  EXPECT_EQ(wrong.load(), 0u) << "a function returned a wrong result while detached";
  g_entries = 0;
  EXPECT_EQ(call_all(), expect);
  EXPECT_EQ(g_entries.load(), 0u) << "a program ran after detach_many returned";
  for (const ut::LinkInfo& l : m.links())
    EXPECT_NE(l.prog, reinterpret_cast<uint64_t>(&count_entry)) << "link " << l.id << " still live";
}

// Attaching to a function with no link and detaching its last link are one patch batch
// each (its site and its stub's hop together), and the program runs exactly while
// attached. Single-threaded, so that no thread preempted inside an image can make
// detach disable its calls (another batch).
TEST(TrampMany, AttachAndDetachAreOneBatchEach) {
  namespace ut = utramp::tramp;
  auto& m = ut::Manager::instance();
  const uint64_t f = reinterpret_cast<uint64_t>(mf_table[7]);
  const long want = mf_table[7](7);
  {  // The first attach makes the trampoline and may canonicalise the site first.
    auto l = m.attach(f, ut::AttachType::fentry, reinterpret_cast<uint64_t>(&count_entry), {});
    ASSERT_TRUE(l) << l.error().message;
    ASSERT_TRUE(m.detach(*l));
  }
  for (int round = 0; round < 3; ++round) {
    const utramp::patch::PatchStats s0 = utramp::patch::stats();
    auto l = m.attach(f, ut::AttachType::fentry, reinterpret_cast<uint64_t>(&count_entry), {});
    ASSERT_TRUE(l) << l.error().message;
    const utramp::patch::PatchStats s1 = utramp::patch::stats();
    g_entries = 0;
    EXPECT_EQ(mf_table[7](7), want);
    EXPECT_EQ(g_entries.load(), 1u) << "round " << round;
    ASSERT_TRUE(m.detach(*l));
    const utramp::patch::PatchStats s2 = utramp::patch::stats();
    EXPECT_EQ(mf_table[7](7), want);
    EXPECT_EQ(g_entries.load(), 1u) << "the program ran after detach";
    EXPECT_EQ(s1.batches - s0.batches, 1u) << "attach, round " << round;
    EXPECT_EQ(s2.batches - s1.batches, 1u) << "detach, round " << round;
  }
}

}  // namespace
