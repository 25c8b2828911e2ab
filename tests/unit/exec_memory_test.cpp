#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "arch/arch.hpp"
#include "os/exec_memory.hpp"
#include "os/maps.hpp"

using namespace utramp;

namespace {
int some_function() { return 42; }
}  // namespace

TEST(ExecMemory, AllocatesWithinRel32OfTarget) {
  const uint64_t target = reinterpret_cast<uint64_t>(&some_function);
  const auto w = arch::rel32_window(target);
  auto& arena = os::ExecArena::instance();
  std::vector<os::ExecBlock> blocks;
  for (int i = 0; i < 100; ++i) {
    auto b = arena.allocate(64, w.lo, w.hi);
    ASSERT_TRUE(b.ok()) << b.error().message;
    EXPECT_TRUE(arch::rel32_reaches(target + 5, b->addr));
    EXPECT_TRUE(arch::rel32_reaches(b->addr + b->size, target));
    EXPECT_EQ(b->addr % os::ExecArena::kAlign, 0u);
    blocks.push_back(*b);
  }
  // Small blocks are packed: 100 x 64 bytes fit in one chunk.
  auto maps = os::read_maps();
  ASSERT_TRUE(maps.ok());
  const os::Mapping* m0 = os::find_mapping(*maps, blocks.front().addr);
  ASSERT_NE(m0, nullptr);
  for (auto& b : blocks) EXPECT_EQ(os::find_mapping(*maps, b.addr), m0);
  EXPECT_TRUE(m0->r && m0->x && !m0->w) << "executable memory must never be writable";
  for (auto& b : blocks) arena.free(b);
}

TEST(ExecMemory, WrittenCodeRunsAndPagesStayNonWritable) {
  const uint64_t target = reinterpret_cast<uint64_t>(&some_function);
  const auto w = arch::rel32_window(target);
  auto& arena = os::ExecArena::instance();
  static uint64_t counter = 0;
  auto b = arena.allocate(64, w.lo, w.hi);
  ASSERT_TRUE(b.ok());
  auto stub = arch::emit_counting_stub(b->addr, reinterpret_cast<uint64_t>(&counter));
  ASSERT_TRUE(stub.ok()) << stub.error().message;
  ASSERT_TRUE(arena.write(*b, 0, *stub).ok());
  auto fn = reinterpret_cast<void (*)()>(b->addr);
  fn();
  fn();
  EXPECT_EQ(counter, 2u);
  auto maps = os::read_maps();
  ASSERT_TRUE(maps.ok());
  for (const auto& m : *maps) EXPECT_FALSE(m.w && m.x) << std::hex << m.start << " " << m.path;
  arena.free(*b);
}

TEST(ExecMemory, RefusesImpossibleRequests) {
  auto& arena = os::ExecArena::instance();
  EXPECT_FALSE(arena.allocate(0, 0x10000, 0x20000).ok());
  EXPECT_FALSE(arena.allocate(64, 0x20000, 0x10000).ok());
  auto b = arena.allocate(64, 0x10000, 0x10040);  // a window too small for any chunk
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code, Errc::no_memory);
}

TEST(ExecMemory, WriteOutsideBlockIsRefused) {
  const uint64_t target = reinterpret_cast<uint64_t>(&some_function);
  const auto w = arch::rel32_window(target);
  auto& arena = os::ExecArena::instance();
  auto b = arena.allocate(16, w.lo, w.hi);
  ASSERT_TRUE(b.ok());
  std::vector<uint8_t> big(b->size + 1, 0x90);
  EXPECT_FALSE(arena.write(*b, 0, big).ok());
  arena.free(*b);
}

TEST(ExecMemory, FreedChunksAreReturned) {
  const uint64_t target = reinterpret_cast<uint64_t>(&some_function);
  const auto w = arch::rel32_window(target);
  auto& arena = os::ExecArena::instance();
  const size_t before = arena.bytes_in_use();
  for (int round = 0; round < 200; ++round) {
    auto b = arena.allocate(os::ExecArena::kChunkSize / 2, w.lo, w.hi);
    ASSERT_TRUE(b.ok());
    arena.free(*b);
  }
  EXPECT_EQ(arena.bytes_in_use(), before);
  EXPECT_LE(arena.chunk_count(), 2u);
}

// An image's block is allocated at its size bound, then cut to its code: the rest is
// the next block's, and the cut block frees as any other.
TEST(ExecMemory, ShrunkBlockGivesBackItsTail) {
  const uint64_t target = reinterpret_cast<uint64_t>(&some_function);
  const auto w = arch::rel32_window(target);
  auto& arena = os::ExecArena::instance();
  const size_t before = arena.bytes_in_use();
  auto a = arena.allocate(4096, w.lo, w.hi);
  ASSERT_TRUE(a.ok());
  os::ExecBlock cut = *a;
  arena.shrink(cut, 100);
  EXPECT_EQ(cut.addr, a->addr);
  EXPECT_EQ(cut.size, 112u);  // rounded up to kAlign
  EXPECT_EQ(arena.bytes_in_use(), before + 112);
  auto b = arena.allocate(64, cut.addr, cut.addr + 4096);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->addr, cut.addr + 112) << "the tail is the next block's";
  // The tail was never written: it still traps.
  EXPECT_EQ(*reinterpret_cast<const uint8_t*>(b->addr + 64), 0xcc);
  arena.shrink(*b, 200);  // no bigger than it is: unchanged
  EXPECT_EQ(b->size, 64u);
  arena.free(*b);
  arena.free(cut);
  EXPECT_EQ(arena.bytes_in_use(), before);
  auto again = arena.allocate(4096, cut.addr, cut.addr + 4096);
  ASSERT_TRUE(again.ok()) << "freed and coalesced: the whole range is one block again";
  arena.free(*again);
}
