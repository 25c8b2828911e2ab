// The user-stack unwinder (arch/unwind.hpp): call chains of known return addresses, with
// and without frame pointers; registers that point nowhere end the stack without a
// fault; return addresses given to the fix-up.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <vector>

#include "arch/unwind.hpp"
#include "os/safe_copy.hpp"

extern "C" {
typedef void (*chain_cb)(uint64_t ip, uint64_t sp, uint64_t bp);
extern uint64_t chain_fp_ras[4], chain_nofp_ras[4];
void chain_fp_a(chain_cb cb);
void chain_nofp_a(chain_cb cb);
}

namespace utramp::arch {
namespace {

std::vector<uint64_t> g_ips;
UnwindRegs g_regs;
ReturnAddressFix g_fix = nullptr;

uint64_t g_two[2];
size_t g_two_n = 0, g_zero_n = 0;

void take(uint64_t ip, uint64_t sp, uint64_t bp) {
  g_regs = {ip, sp, bp};
  uint64_t ips[64];
  g_ips.assign(ips, ips + unwind_user(g_regs, ips, 64, g_fix, os::safe_read));
  g_two_n = unwind_user(g_regs, g_two, 2, g_fix, os::safe_read);
  g_zero_n = unwind_user(g_regs, g_two + 1, 0, g_fix, os::safe_read);
}

// One call site, so that every run has the same stack.
__attribute__((noinline)) void run_nofp() {
  chain_nofp_a(take);
  __asm__ volatile("" ::: "memory");
}

void expect_chain(void (*a)(chain_cb), const uint64_t* ras) {
  g_ips.clear();
  a(take);
  ASSERT_GE(g_ips.size(), 5u);
  EXPECT_EQ(g_ips[0], g_regs.ip);  // the first frame: where the registers were taken
  EXPECT_EQ(g_ips[1], ras[0]);     // leaf's caller, b
  EXPECT_EQ(g_ips[2], ras[1]);     // b's caller, a
  EXPECT_EQ(g_ips[3], ras[2]);     // a's caller: this test
  // ... and on through gtest's frames to the thread's start.
  EXPECT_LE(g_ips.size(), 64u);
}

TEST(Unwind, ChainWithFramePointers) { expect_chain(chain_fp_a, chain_fp_ras); }
TEST(Unwind, ChainWithoutFramePointersByCfi) { expect_chain(chain_nofp_a, chain_nofp_ras); }

TEST(Unwind, TheSameStackAgainGivesTheSameFrames) {
  std::vector<uint64_t> runs[2];
  for (auto& r : runs) {  // the second's rows come from the cache
    run_nofp();
    r = g_ips;
  }
  // Up to run_nofp (a compiler may unroll the loop: two call sites of it).
  ASSERT_GE(runs[0].size(), 5u);
  ASSERT_GE(runs[1].size(), 5u);
  EXPECT_EQ(std::vector<uint64_t>(runs[0].begin(), runs[0].begin() + 4),
            std::vector<uint64_t>(runs[1].begin(), runs[1].begin() + 4));
}

TEST(Unwind, MaxFramesIsAnUpperBound) {
  chain_nofp_a(take);
  EXPECT_EQ(g_two_n, 2u);
  EXPECT_EQ(g_two[1], chain_nofp_ras[0]);
  EXPECT_EQ(g_zero_n, 0u);
}

// Registers that point nowhere: the first frame is the ip, and the stack ends there.
TEST(Unwind, BadRegistersEndTheStackWithoutAFault) {
  void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  const uint64_t none = reinterpret_cast<uint64_t>(page);
  uint64_t ips[8];
  for (const UnwindRegs r : {UnwindRegs{1, 2, 3}, UnwindRegs{0x1234, none + 64, none + 128},
                             UnwindRegs{reinterpret_cast<uint64_t>(&take), none + 64, none + 128},
                             UnwindRegs{0, 0, 0}, UnwindRegs{~0ull, ~0ull - 7, ~0ull - 15}}) {
    EXPECT_EQ(unwind_user(r, ips, 8, nullptr, os::safe_read), 1u);
    EXPECT_EQ(ips[0], r.ip);
  }
  munmap(page, 4096);
}

// Every return address read is given to the fix-up, with the stack slot it was read
// from; what it gives is the frame (0 ends the stack).
uint64_t g_marker_slot = 0;
uint64_t mark_b(uint64_t ra, uint64_t slot) noexcept {
  if (ra == chain_nofp_ras[1]) {
    g_marker_slot = slot;
    return 0xabc;
  }
  return ra;
}
uint64_t stop_at_b(uint64_t ra, uint64_t) noexcept { return ra == chain_nofp_ras[1] ? 0 : ra; }

TEST(Unwind, ReturnAddressesGoThroughTheFix) {
  g_fix = mark_b;
  chain_nofp_a(take);
  g_fix = nullptr;
  ASSERT_GE(g_ips.size(), 3u);
  EXPECT_EQ(g_ips[2], 0xabcu);
  EXPECT_GT(g_marker_slot, g_regs.sp);
  g_fix = stop_at_b;
  chain_nofp_a(take);
  g_fix = nullptr;
  EXPECT_EQ(g_ips.size(), 2u);
}

}  // namespace
}  // namespace utramp::arch
