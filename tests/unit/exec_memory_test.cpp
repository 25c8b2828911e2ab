#include <gtest/gtest.h>
#include <sys/mman.h>
#include <linux/perf_event.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <cstdint>
#include <vector>

#include "arch/arch.hpp"
#include "os/exec_memory.hpp"
#include "os/maps.hpp"
#include "os/text_writer.hpp"

using namespace utramp;

namespace {
int some_function() { return 42; }

// No mapping of this process is writable and executable at once.
void expect_no_wx(const char* step) {
  auto maps = os::read_maps();
  ASSERT_TRUE(maps.ok()) << maps.error().message;
  for (const auto& m : *maps)
    EXPECT_FALSE(m.w && m.x) << step << ": " << std::hex << m.start << "-" << m.end << " " << m.path;
}

// Whether [addr, addr+len) is executable as the kernel says now.
bool executable(uint64_t addr, size_t len) {
  auto maps = os::read_maps();
  return maps.ok() && os::range_executable(*maps, addr, len);
}

// Chunks of the small size only, for the tests of where chunks go and how many there
// are (a window's chunks after its first are huge otherwise: HugeChunksAfterAWindowsFirst).
struct SmallChunksOnly {
  SmallChunksOnly() { setenv("UTRAMP_NO_HUGE_CHUNKS", "1", 1); }
  ~SmallChunksOnly() { unsetenv("UTRAMP_NO_HUGE_CHUNKS"); }
  SmallChunksOnly(const SmallChunksOnly&) = delete;
  SmallChunksOnly& operator=(const SmallChunksOnly&) = delete;
};

// A window where nothing is mapped yet (each test its own): its chunk is new.
os::ExecBlock fresh_block(uint64_t lo, size_t size) {
  auto b = os::ExecArena::instance().allocate(size, lo, lo + (uint64_t{1} << 30));
  EXPECT_TRUE(b.ok()) << b.error().message;
  return b ? *b : os::ExecBlock{};
}
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
    const std::vector<uint8_t> ret(b->size, 0xc3);
    ASSERT_TRUE(arena.stage(*b, 0, ret).ok());
  }
  ASSERT_TRUE(arena.seal_staged().ok());
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
  const SmallChunksOnly small;
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
  const SmallChunksOnly small;
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
  // What the kernel says agrees with the copy once the blocks are written (the copy
  // runs ahead of the seal: only blocks written and sealed are ever patched).
  EXPECT_FALSE(executable(a->addr, a->size));
  const std::vector<uint8_t> traps(kLarger, 0xcc);
  ASSERT_TRUE(arena.write(*a, 0, traps).ok());
  ASSERT_TRUE(arena.write(*b, 0, traps).ok());
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
  const SmallChunksOnly small;
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
    ASSERT_TRUE(arena.write(*b, 0, std::vector<uint8_t>(b->size, 0xcc)).ok());
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
  // Nothing is sealed until code is written: the whole chunk is read-write and not
  // executable (never both); only the filled part is touched.
  const uint64_t start = m->start, end = start + os::ExecArena::kChunkSize;
  EXPECT_EQ(start, a->addr);
  EXPECT_EQ(m->end, end);
  EXPECT_TRUE(m->w && !m->x);
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
  // Written: sealed up to b's end, the whole chunk one read+exec mapping.
  const std::vector<uint8_t> ret(b->size, 0xc3);
  ASSERT_TRUE(arena.write(*b, 0, ret).ok());
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

// Staged code is stored directly (no write through /proc/self/mem), is not executable
// until sealed, and runs once sealed; no step leaves a mapping writable and executable.
TEST(ExecMemory, StagedCodeArrivesWithoutProcSelfMemAndRunsOnceSealed) {
  auto& arena = os::ExecArena::instance();
  static uint64_t counter = 0;
  const os::ExecBlock b = fresh_block(uint64_t{0x3b0000000000}, 64);
  ASSERT_TRUE(b);
  expect_no_wx("allocated");
  EXPECT_FALSE(executable(b.addr, b.size)) << "a block is executable only once written";
  auto stub = arch::emit_counting_stub(b.addr, reinterpret_cast<uint64_t>(&counter));
  ASSERT_TRUE(stub.ok()) << stub.error().message;
  const auto before = os::text_write_count();
  ASSERT_TRUE(arena.stage(b, 0, *stub).ok());
  EXPECT_EQ(os::text_write_count().writes, before.writes) << "staged through /proc/self/mem";
  EXPECT_TRUE(std::equal(stub->begin(), stub->end(), reinterpret_cast<const uint8_t*>(b.addr)));
  EXPECT_FALSE(executable(b.addr, b.size)) << "staged code is sealed by seal_staged() only";
  expect_no_wx("staged");
  ASSERT_TRUE(arena.seal_staged().ok());
  expect_no_wx("sealed");
  EXPECT_TRUE(executable(b.addr, b.size));
  EXPECT_EQ(os::text_write_count().writes, before.writes);
  reinterpret_cast<void (*)()>(b.addr)();
  EXPECT_EQ(counter, 1u);
  arena.free(b);
  expect_no_wx("freed");
}

// write() seals the page of its last byte: a block handed out later in that page (or
// staged across its end) is written through /proc/self/mem where it is sealed and
// stored directly past it, and runs.
TEST(ExecMemory, WritesIntoASealedPageStillWork) {
  auto& arena = os::ExecArena::instance();
  static uint64_t counter = 0;
  const os::ExecBlock a = fresh_block(uint64_t{0x3c0000000000}, 64);
  ASSERT_TRUE(a);
  const std::vector<uint8_t> ret(a.size, 0xc3);
  auto before = os::text_write_count();
  ASSERT_TRUE(arena.write(a, 0, ret).ok());
  EXPECT_EQ(os::text_write_count().writes, before.writes);
  EXPECT_TRUE(executable(a.addr, a.size));
  expect_no_wx("written");
  // The next block, in a's page (sealed).
  auto b = arena.allocate(64, a.addr, a.addr + 4096);
  ASSERT_TRUE(b.ok()) << b.error().message;
  ASSERT_EQ(b->addr, a.addr + a.size);
  EXPECT_TRUE(executable(b->addr, b->size));
  auto stub = arch::emit_counting_stub(b->addr, reinterpret_cast<uint64_t>(&counter));
  ASSERT_TRUE(stub.ok()) << stub.error().message;
  before = os::text_write_count();
  ASSERT_TRUE(arena.write(*b, 0, *stub).ok());
  EXPECT_EQ(os::text_write_count().writes, before.writes + 1) << "a sealed page takes /proc/self/mem";
  expect_no_wx("written into a sealed page");
  reinterpret_cast<void (*)()>(b->addr)();
  EXPECT_EQ(counter, 1u);
  // A block across the sealed page's end: its head through /proc/self/mem, the rest
  // stored.
  auto c = arena.allocate(8192, a.addr, a.addr + 4 * 4096);
  ASSERT_TRUE(c.ok()) << c.error().message;
  const uint64_t page_end = (a.addr | 0xfff) + 1;
  ASSERT_LT(c->addr, page_end);
  std::vector<uint8_t> code(c->size);
  for (size_t i = 0; i < code.size(); ++i) code[i] = static_cast<uint8_t>(i * 7);
  before = os::text_write_count();
  ASSERT_TRUE(arena.stage(*c, 0, code).ok());
  const auto after = os::text_write_count();
  EXPECT_EQ(after.writes, before.writes + 1);
  EXPECT_EQ(after.bytes - before.bytes, page_end - c->addr);
  EXPECT_TRUE(std::equal(code.begin(), code.end(), reinterpret_cast<const uint8_t*>(c->addr)));
  ASSERT_TRUE(arena.seal_staged().ok());
  EXPECT_TRUE(executable(c->addr, c->size));
  expect_no_wx("sealed across a page");
  arena.free(*c);
  arena.free(*b);
  arena.free(a);
}

// A block freed before it was sealed (a batch whose request failed) is int3 again,
// stored directly; one freed after is refilled through /proc/self/mem.
TEST(ExecMemory, FreedBlocksAreInt3SealedOrNot) {
  auto& arena = os::ExecArena::instance();
  const os::ExecBlock keep = fresh_block(uint64_t{0x3d0000000000}, 16);  // keeps the chunk mapped
  ASSERT_TRUE(keep);
  auto a = arena.allocate(256, keep.addr, keep.addr + 8192);
  ASSERT_TRUE(a.ok()) << a.error().message;
  const std::vector<uint8_t> nops(a->size, 0x90);
  ASSERT_TRUE(arena.stage(*a, 0, nops).ok());
  const auto before = os::text_write_count();
  arena.free(*a);
  EXPECT_EQ(os::text_write_count().writes, before.writes) << "an unsealed block is refilled directly";
  for (size_t i = 0; i < a->size; ++i)
    ASSERT_EQ(reinterpret_cast<const uint8_t*>(a->addr)[i], 0xcc) << "byte " << i;
  expect_no_wx("freed unsealed");
  // Handed out again, written (sealed), freed: int3 again.
  auto again = arena.allocate(256, keep.addr, keep.addr + 8192);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->addr, a->addr);
  ASSERT_TRUE(arena.write(*again, 0, nops).ok());
  EXPECT_TRUE(executable(again->addr, again->size));
  arena.free(*again);
  for (size_t i = 0; i < again->size; ++i)
    ASSERT_EQ(reinterpret_cast<const uint8_t*>(again->addr)[i], 0xcc) << "byte " << i;
  expect_no_wx("freed sealed");
  arena.free(keep);
}

// Page faults counted mean nothing under AddressSanitizer: its interceptors, shadow
// memory and allocator fault too.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

// The minor faults of this process so far.
long minor_faults() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return r.ru_minflt;
}

// The kB of huge pages mapping [addr, addr+len), as /proc/self/smaps says.
long huge_kb_at(uint64_t addr) {
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  bool in = false;
  long kb = 0;
  while (std::fgets(line, sizeof line, f)) {
    unsigned long s = 0, e = 0;
    if (std::sscanf(line, "%lx-%lx ", &s, &e) == 2 && std::strchr(line, '-') < std::strchr(line, ' ')) {
      in = addr >= s && addr < e;
      continue;
    }
    long v = 0;
    if (in && std::sscanf(line, "AnonHugePages: %ld kB", &v) == 1) kb += v;
  }
  std::fclose(f);
  return kb;
}

// A window's first chunk is small; the next one is a huge page: 2 MiB aligned, filled
// whole by one fault, and 1 MiB of code stored and sealed in it faults no page more (with
// small pages, 256 and more).
TEST(ExecMemory, HugeChunksAfterAWindowsFirst) {
  if (!os::ExecArena::huge_pages_usable()) GTEST_SKIP() << "no transparent huge pages here";
  if (kAsan) GTEST_SKIP() << "faults are not counted under AddressSanitizer";
  auto& arena = os::ExecArena::instance();
  const uint64_t lo = uint64_t{0x3e0000000000}, hi = lo + (uint64_t{1} << 30);
  const os::ExecBlock first = fresh_block(lo, os::ExecArena::kChunkSize);  // fills the small one
  ASSERT_TRUE(first);
  constexpr size_t kBlock = 64 * 1024, kBlocks = 16;
  const std::vector<uint8_t> code(kBlock, 0xc3);
  std::vector<os::ExecBlock> blocks;
  blocks.reserve(kBlocks);
  const long f0 = minor_faults();
  auto b0 = arena.allocate(kBlock, lo, hi);
  ASSERT_TRUE(b0.ok()) << b0.error().message;
  const long filled = minor_faults() - f0;
  blocks.push_back(*b0);
  const uint64_t base = b0->addr & ~uint64_t{os::ExecArena::kHugeChunk - 1};
  EXPECT_EQ(b0->addr, base) << "a huge chunk starts at a 2 MiB boundary, its first block with it";
  if (huge_kb_at(base) < 2048) GTEST_SKIP() << "the kernel had no huge page free (small pages given)";
  for (size_t i = 1; i < kBlocks; ++i) {
    auto b = arena.allocate(kBlock, lo, hi);
    ASSERT_TRUE(b.ok()) << b.error().message;
    blocks.push_back(*b);
  }
  for (const os::ExecBlock& b : blocks) {
    EXPECT_EQ(b.addr & ~uint64_t{os::ExecArena::kHugeChunk - 1}, base) << "in the huge chunk";
    ASSERT_TRUE(arena.stage(b, 0, code).ok());
  }
  ASSERT_TRUE(arena.seal_staged().ok());
  const long faults = minor_faults() - f0;
  EXPECT_LE(filled, 4) << "the fill of a huge chunk is one fault";
  EXPECT_LT(faults, 32) << "1 MiB of code in a huge chunk";
  EXPECT_TRUE(executable(blocks.front().addr, kBlock * kBlocks));
  expect_no_wx("huge chunk sealed");
  for (const os::ExecBlock& b : blocks) arena.free(b);
  arena.free(first);
}

// A fill step's pages are made present together (madvise(MADV_POPULATE_WRITE)), not by a
// page fault each: the first block of a new small chunk takes no fault exception. (The
// kernel counts the populated pages in getrusage's minor faults too; the software event
// counts only faults taken.)
TEST(ExecMemory, AFillStepTakesNoFaultPerPage) {
  if (kAsan) GTEST_SKIP() << "faults are not counted under AddressSanitizer";
  {
    void* probe = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(probe, MAP_FAILED);
    const bool populates = madvise(probe, 4096, MADV_POPULATE_WRITE) == 0;
    munmap(probe, 4096);
    if (!populates) GTEST_SKIP() << "the kernel has no MADV_POPULATE_WRITE";
  }
  perf_event_attr pe{};
  pe.type = PERF_TYPE_SOFTWARE;
  pe.size = sizeof pe;
  pe.config = PERF_COUNT_SW_PAGE_FAULTS;
  pe.exclude_kernel = 0;
  const int fd = static_cast<int>(syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0));
  if (fd < 0) GTEST_SKIP() << "no perf events here: " << strerror(errno);
  auto& arena = os::ExecArena::instance();
  const uint64_t lo = uint64_t{0x3f0000000000}, hi = lo + (uint64_t{1} << 30);
  (void)os::maps_copy();  // read before: its heap is not the fill's
  uint64_t before = 0, after = 0;
  ASSERT_EQ(read(fd, &before, sizeof before), static_cast<ssize_t>(sizeof before));
  auto a = arena.allocate(64, lo, hi);
  ASSERT_EQ(read(fd, &after, sizeof after), static_cast<ssize_t>(sizeof after));
  close(fd);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_LT(after - before, 8u) << "the fill of " << os::ExecArena::kFillStep / 4096 << " pages";
  for (size_t i = 0; i < a->size; ++i) EXPECT_EQ(reinterpret_cast<const uint8_t*>(a->addr)[i], 0xcc);
  arena.free(*a);
}
