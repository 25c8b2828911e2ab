#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

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

constexpr size_t kLarger = os::ExecArena::kChunkSize + 4096;

// The arena places its chunks from the shared copy of the mappings (os::maps_copy), not
// from /proc/self/maps read again for each: a new chunk is added to the copy, which the
// patcher then finds executable; an unmapped chunk makes the copy read again.
TEST(ExecMemory, ChunksKeepTheSharedCopyOfTheMappings) {
  const uint64_t target = reinterpret_cast<uint64_t>(&some_function);
  const auto w = arch::rel32_window(target);
  auto& arena = os::ExecArena::instance();
  auto first = os::maps_copy();
  ASSERT_TRUE(first.ok()) << first.error().message;
  auto same = os::maps_copy();
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(first->get(), same->get()) << "nothing was unmapped: the copy is kept";
  // Two blocks larger than a chunk: each in a new chunk of its own.
  const size_t chunks = arena.chunk_count();
  auto a = arena.allocate(kLarger, w.lo, w.hi);
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto b = arena.allocate(kLarger, w.lo, w.hi);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(arena.chunk_count(), chunks + 2);
  auto noted = os::maps_copy();
  ASSERT_TRUE(noted.ok());
  EXPECT_TRUE(os::range_executable(**noted, a->addr, a->size));
  EXPECT_TRUE(os::range_executable(**noted, b->addr, b->size));
  // What the kernel says agrees with the copy.
  auto real = os::read_maps();
  ASSERT_TRUE(real.ok());
  EXPECT_TRUE(os::range_executable(*real, a->addr, a->size));
  EXPECT_TRUE(os::range_executable(*real, b->addr, b->size));
  const auto kept = noted->get();
  arena.free(*b);  // its chunk is unmapped: the copy no longer holds
  auto after = os::maps_copy();
  ASSERT_TRUE(after.ok());
  EXPECT_NE(after->get(), kept) << "an unmapped chunk makes the copy read again";
  EXPECT_FALSE(os::range_executable(**after, b->addr, b->size));
  arena.free(*a);
}

// A copy that does not show a mapping made since: the placement the kernel refuses
// (MAP_FIXED_NOREPLACE) is tried elsewhere, never over it.
TEST(ExecMemory, StaleCopyNeverPlacesAChunkOverANewMapping) {
  const uint64_t target = reinterpret_cast<uint64_t>(&some_function);
  const auto w = arch::rel32_window(target);
  auto& arena = os::ExecArena::instance();
  ASSERT_TRUE(os::maps_copy(true).ok());
  // Mappings the copy does not show, where the next chunks would go (the kernel takes
  // the hint, the window's middle, or the nearest free place).
  std::vector<void*> taken;
  for (int i = 0; i < 8; ++i) {
    void* p = mmap(reinterpret_cast<void*>(w.lo / 2 + w.hi / 2), kLarger * 2, PROT_READ,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    taken.push_back(p);
  }
  std::vector<os::ExecBlock> blocks;
  for (int i = 0; i < 4; ++i) {
    auto b = arena.allocate(kLarger, w.lo, w.hi);
    ASSERT_TRUE(b.ok()) << b.error().message;
    blocks.push_back(*b);
  }
  auto real = os::read_maps();
  ASSERT_TRUE(real.ok());
  for (const auto& b : blocks) {
    EXPECT_TRUE(os::range_executable(*real, b.addr, b.size));
    for (void* p : taken) {
      const uint64_t s = reinterpret_cast<uint64_t>(p), e = s + kLarger * 2;
      EXPECT_FALSE(b.addr < e && s < b.addr + b.size) << "a chunk over a mapping it did not make";
    }
  }
  for (const auto& b : blocks) arena.free(b);
  for (void* p : taken) munmap(p, kLarger * 2);
}

// A new chunk's pages are touched as blocks reach them: int3 ahead of every block handed
// out, never a page no block reached (a program of 3 functions filled three 256 KiB
// chunks for a few hundred bytes of code).
TEST(ExecMemory, ChunkPagesAreFilledAsBlocksReachThem) {
  // A window where nothing is mapped yet: its chunk is new.
  const uint64_t lo = uint64_t{0x3a0000000000}, hi = lo + (uint64_t{1} << 30);
  auto& arena = os::ExecArena::instance();
  auto a = arena.allocate(64, lo, hi);
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto maps = os::read_maps();
  ASSERT_TRUE(maps.ok());
  const os::Mapping* m = os::find_mapping(*maps, a->addr);
  ASSERT_NE(m, nullptr);
  // The filled part is sealed read+exec; the rest of the chunk, which no block reached,
  // is read-write and never executable (never both).
  const uint64_t start = m->start, end = start + os::ExecArena::kChunkSize;
  ASSERT_EQ(m->end - m->start, os::ExecArena::kFillStep);
  EXPECT_TRUE(m->r && m->x && !m->w);
  const os::Mapping* tail = os::find_mapping(*maps, m->end);
  ASSERT_NE(tail, nullptr);
  EXPECT_EQ(tail->end, end);
  EXPECT_TRUE(tail->w && !tail->x);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident(os::ExecArena::kChunkSize / page);
  auto touched = [&] {
    EXPECT_EQ(mincore(reinterpret_cast<void*>(start), os::ExecArena::kChunkSize, resident.data()), 0);
    size_t n = 0;
    for (unsigned char r : resident) n += r & 1;
    return n * page;
  };
  EXPECT_EQ(touched(), os::ExecArena::kFillStep);
  for (size_t i = 0; i < a->size; ++i) EXPECT_EQ(reinterpret_cast<const uint8_t*>(a->addr)[i], 0xcc);
  // A block at the chunk's end: the fill reaches it, and it is int3 too.
  auto b = arena.allocate(64, end - 64, end);
  ASSERT_TRUE(b.ok()) << b.error().message;
  ASSERT_EQ(b->addr, end - 64);
  for (size_t i = 0; i < b->size; ++i) EXPECT_EQ(reinterpret_cast<const uint8_t*>(b->addr)[i], 0xcc);
  EXPECT_EQ(touched(), os::ExecArena::kChunkSize);
  // Now sealed whole: one read+exec mapping, nothing writable.
  maps = os::read_maps();
  ASSERT_TRUE(maps.ok());
  m = os::find_mapping(*maps, start);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->start, start);
  EXPECT_EQ(m->end, end);
  EXPECT_TRUE(m->r && m->x && !m->w);
  arena.free(*b);
  arena.free(*a);
}
