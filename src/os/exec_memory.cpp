#include "os/exec_memory.hpp"

#include <fmt/format.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "os/maps.hpp"
#include "os/text_writer.hpp"

namespace utramp::os {

namespace {

constexpr uint8_t kFill = 0xcc;  // int3: stale execution traps

uint64_t page_size() {
  static const uint64_t p = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return p;
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

// Fills [p, p+len) of a chunk's read-write part with int3. Its pages are made present
// first by one madvise(MADV_POPULATE_WRITE), not by a page fault each (a fault costs
// several times as much as the kernel's own walk in a VM); a kernel without it faults
// them in as before.
void fill(void* p, size_t len) {
  (void)madvise(p, len, MADV_POPULATE_WRITE);
  std::memset(p, kFill, len);
}

// Whether madvise(MADV_HUGEPAGE) gives a region huge pages: the kernel's transparent
// huge pages are on for such regions ("[always]" or "[madvise]", not "[never]").
bool read_huge_pages_usable() {
  char buf[128] = {};
  const int fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  const std::string_view v(buf, static_cast<size_t>(n));
  return v.find("[always]") != v.npos || v.find("[madvise]") != v.npos;
}

}  // namespace

bool ExecArena::huge_pages_usable() {
  if (const char* e = getenv("UTRAMP_NO_HUGE_CHUNKS"); e && *e) return false;  // tests, benchmarks
  static const bool usable = read_huge_pages_usable();
  return usable;
}

ExecArena& ExecArena::instance() {
  static ExecArena* arena = new ExecArena();  // never destroyed: code may outlive statics
  return *arena;
}

bool ExecArena::take(Chunk& c, size_t size, uint64_t lo, uint64_t hi, uint64_t* out) {
  for (size_t i = 0; i < c.free.size(); ++i) {
    Range& r = c.free[i];
    uint64_t start = align_up(c.base + r.off, kAlign);
    if (start < lo) start = align_up(lo, kAlign);
    const uint64_t end = c.base + r.off + r.len;
    if (start + size > end || start + size > hi) continue;
    // Split the free range around [start, start+size).
    const uint64_t before = start - (c.base + r.off);
    const uint64_t after = end - (start + size);
    const uint64_t roff = r.off;
    c.free.erase(c.free.begin() + static_cast<ptrdiff_t>(i));
    if (after) c.free.insert(c.free.begin() + static_cast<ptrdiff_t>(i),
                             Range{start + size - c.base, after});
    if (before) c.free.insert(c.free.begin() + static_cast<ptrdiff_t>(i), Range{roff, before});
    c.used += size;
    *out = start;
    return true;
  }
  return false;
}

Result<ExecArena::Chunk*> ExecArena::new_chunk(size_t size, uint64_t lo, uint64_t hi) {
  // A window that has filled a chunk already gets a huge one (the header comment); the
  // first stays small, so a program with a few traced functions does not pay 2 MiB.
  const bool huge = huge_pages_usable() &&
                    std::any_of(chunks_.begin(), chunks_.end(), [&](const Chunk& c) {
                      return c.base + c.size > lo && c.base < hi;
                    });
  // The shared copy of the mappings first (os::maps_copy): where it is out of date the
  // placements fail (MAP_FIXED_NOREPLACE) and the mappings are read again. A huge chunk
  // that finds no aligned room is made small.
  for (int pass = 0; pass < 2; ++pass) {
    auto maps = maps_copy(pass == 1);
    if (!maps) return std::move(maps).error();
    for (bool h : {huge, false}) {
      auto c = new_chunk_in(**maps, size, lo, hi, h);
      if (!c || *c) return c;
      if (!huge) break;
    }
  }
  return make_error(Errc::no_memory,
                    fmt::format("no free {} bytes of address space within [{:#x}, {:#x})",
                                align_up(std::max(size, kChunkSize), page_size()), lo, hi));
}

Result<ExecArena::Chunk*> ExecArena::new_chunk_in(const std::vector<Mapping>& maps, size_t size,
                                                  uint64_t lo, uint64_t hi, bool huge) {
  const uint64_t ps = page_size();
  const uint64_t want = huge ? align_up(std::max<uint64_t>(size, kHugeChunk), kHugeChunk)
                             : align_up(std::max(size, kChunkSize), ps);
  const uint64_t align = huge ? kHugeChunk : ps;
  const uint64_t mid = lo / 2 + hi / 2;
  // Candidate gaps between mappings, clipped to the window, nearest to its middle first.
  struct Gap { uint64_t start, end; };
  std::vector<Gap> gaps;
  uint64_t prev_end = ps * 16;
  auto consider = [&](uint64_t gs, uint64_t ge) {
    gs = std::max(align_up(gs, align), align_up(lo, align));
    ge = std::min(ge, hi) & ~(ps - 1);
    if (ge > gs && ge - gs >= want) gaps.push_back({gs, ge});
  };
  for (const Mapping& m : maps) {
    if (m.start > prev_end) consider(prev_end, m.start);
    prev_end = std::max(prev_end, m.end);
  }
  consider(prev_end, uint64_t{1} << 47);
  auto dist = [&](const Gap& g) {
    const uint64_t a = std::clamp(mid, g.start, g.end - want);
    return a > mid ? a - mid : mid - a;
  };
  std::sort(gaps.begin(), gaps.end(), [&](const Gap& a, const Gap& b) { return dist(a) < dist(b); });
  for (const Gap& g : gaps) {
    // Keep a guard page away from neighbours where the gap allows it.
    uint64_t at = std::clamp(mid, g.start, g.end - want);
    if (g.end - g.start >= want + 2 * ps) at = std::clamp(at, g.start + ps, g.end - want - ps);
    at &= ~(align - 1);  // at least g.start, which is aligned
    void* p = mmap(reinterpret_cast<void*>(at), want, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED) continue;  // raced with another mapping: next gap
    if (reinterpret_cast<uint64_t>(p) != at) {
      munmap(p, want);  // kernels without MAP_FIXED_NOREPLACE treat it as a hint
      continue;
    }
    // Nothing can execute this memory: fill where the first block goes; it stays
    // read-write until code written there is sealed (the header comment). A huge chunk
    // is filled whole: one fault of a huge page (the kernel's madvise(MADV_HUGEPAGE)),
    // where 4 KiB pages would fault one by one. Should the kernel give small pages
    // after all, only the fill's first step is stored, as for a small chunk.
    size_t first = std::min<uint64_t>(want, align_up(size, kFillStep));
    if (huge && madvise(p, want, MADV_HUGEPAGE) == 0) first = want;
    fill(p, first);
    // The copy of the mappings shows the whole chunk read+exec: it is used to place
    // mappings and to ask whether a patch lies in executable memory, and patches are
    // only ever made in blocks written and sealed (the header comment).
    Mapping m;
    m.start = at;
    m.end = at + want;
    m.r = m.x = true;
    note_mapping(m);
    Chunk c;
    c.base = at;
    c.size = want;
    c.filled = first;
    c.free.push_back({0, want});
    chunks_.push_back(std::move(c));
    return &chunks_.back();
  }
  return nullptr;  // no gap, or each taken meanwhile
}

Result<ExecBlock> ExecArena::allocate(size_t size, uint64_t lo, uint64_t hi) {
  if (size == 0 || lo >= hi)
    return make_error(Errc::invalid_argument,
                      fmt::format("bad executable allocation: {} bytes in [{:#x}, {:#x})", size, lo, hi));
  size = align_up(size, kAlign);
  std::lock_guard lock(mu_);
  uint64_t addr = 0;
  Chunk* in = nullptr;
  for (Chunk& c : chunks_)
    if (c.base + c.size > lo && c.base < hi && take(c, size, lo, hi, &addr)) {
      in = &c;
      break;
    }
  if (!in) {
    auto c = new_chunk(size, lo, hi);
    if (!c) return std::move(c).error();
    if (!take(**c, size, lo, hi, &addr))
      return make_error(Errc::no_memory, "new executable chunk cannot hold the block");
    in = *c;
  }
  fill_to(*in, addr + size);
  return ExecBlock{addr, size};
}

void ExecArena::fill_to(Chunk& c, uint64_t end) {
  if (end <= c.base + c.filled) return;
  // Past c.filled the chunk is read-write and not executable: the int3 is stored
  // directly (a heap buffer per step written through /proc/self/mem cost a tracer's
  // 1,000 images 0.85 MB of writes and as much heap). It is sealed with the code
  // written over it.
  const size_t to = std::min<uint64_t>(c.size, align_up(end - c.base, kFillStep));
  fill(reinterpret_cast<uint8_t*>(c.base + c.filled), to - c.filled);
  c.filled = to;
}

Result<void> ExecArena::seal_to(Chunk& c, size_t to) {
  if (to <= c.sealed) return {};
  auto* from = reinterpret_cast<uint8_t*>(c.base + c.sealed);
  if (mprotect(from, to - c.sealed, PROT_READ | PROT_EXEC) != 0)
    return make_error(Errc::no_memory,
                      fmt::format("mprotect({:#x}, {}, PROT_READ|PROT_EXEC): {}", c.base + c.sealed,
                                  to - c.sealed, strerror(errno)));
  c.sealed = to;
  c.staged = std::max(c.staged, to);
  return {};
}

Result<void> ExecArena::store(Chunk& c, uint64_t addr, std::span<const uint8_t> bytes) {
  // Below c.sealed the page is read+exec (never made writable again): through
  // /proc/self/mem. Past it, read-write and not executable: a plain store.
  const uint64_t sealed_end = c.base + c.sealed;
  size_t slow = 0;
  if (addr < sealed_end) {
    slow = std::min<uint64_t>(bytes.size(), sealed_end - addr);
    UTRAMP_TRY(write_text(addr, bytes.first(slow)));
  }
  if (slow < bytes.size()) {
    std::memcpy(reinterpret_cast<void*>(addr + slow), bytes.data() + slow, bytes.size() - slow);
    c.staged = std::max<size_t>(c.staged, addr + bytes.size() - c.base);
  }
  return {};
}

ExecArena::Chunk* ExecArena::chunk_of(uint64_t addr) {
  for (Chunk& c : chunks_)
    if (addr >= c.base && addr < c.base + c.size) return &c;
  return nullptr;
}

void ExecArena::give_back(Chunk& c, ExecBlock block) {
  const uint64_t off = block.addr - c.base;
  auto it = std::lower_bound(c.free.begin(), c.free.end(), off,
                             [](const Range& r, uint64_t o) { return r.off < o; });
  it = c.free.insert(it, Range{off, block.size});
  // Coalesce with the neighbours.
  if (it + 1 != c.free.end() && it->off + it->len == (it + 1)->off) {
    it->len += (it + 1)->len;
    c.free.erase(it + 1);
  }
  if (it != c.free.begin() && (it - 1)->off + (it - 1)->len == it->off) {
    (it - 1)->len += it->len;
    c.free.erase(it);
  }
  c.used -= block.size;
}

void ExecArena::free(ExecBlock block) {
  if (!block) return;
  std::lock_guard lock(mu_);
  for (size_t ci = 0; ci < chunks_.size(); ++ci) {
    Chunk& c = chunks_[ci];
    if (block.addr < c.base || block.addr >= c.base + c.size) continue;
    static constexpr auto kTraps = [] {
      std::array<uint8_t, 4096> a{};
      a.fill(kFill);
      return a;
    }();
    for (size_t at = 0; at < block.size; at += kTraps.size())
      (void)store(c, block.addr + at,
                  std::span<const uint8_t>(kTraps.data(), std::min(kTraps.size(), block.size - at)));
    give_back(c, block);
    if (c.used == 0 && chunks_.size() > 1) {
      munmap(reinterpret_cast<void*>(c.base), c.size);
      bump_unmap_generation();
      chunks_.erase(chunks_.begin() + static_cast<ptrdiff_t>(ci));
    }
    return;
  }
}

void ExecArena::shrink(ExecBlock& block, size_t size) {
  size = align_up(std::max<size_t>(size, 1), kAlign);
  if (!block || size >= block.size) return;
  std::lock_guard lock(mu_);
  for (Chunk& c : chunks_) {
    if (block.addr < c.base || block.addr >= c.base + c.size) continue;
    // The tail is still the fill (never written): free as it is, joined to a free range
    // that follows it.
    const uint64_t off = block.addr - c.base + size;
    const uint64_t len = block.size - size;
    auto it = std::lower_bound(c.free.begin(), c.free.end(), off,
                               [](const Range& r, uint64_t o) { return r.off < o; });
    if (it != c.free.end() && off + len == it->off) {
      it->off = off;
      it->len += len;
    } else {
      c.free.insert(it, Range{off, len});
    }
    c.used -= len;
    block.size = size;
    return;
  }
}

Result<void> ExecArena::write(ExecBlock block, size_t offset, std::span<const uint8_t> bytes) {
  std::lock_guard lock(mu_);
  Chunk* c = nullptr;
  UTRAMP_TRY(stage_locked(block, offset, bytes, &c));
  // Up to the page end of the last byte: the bytes of other blocks below it that were
  // staged are sealed with them, those handed out and not yet written are then written
  // the slower way.
  const uint64_t end = block.addr + offset + bytes.size();
  return seal_to(*c, std::min<uint64_t>(c->size, align_up(end - c->base, page_size())));
}

Result<void> ExecArena::stage(ExecBlock block, size_t offset, std::span<const uint8_t> bytes) {
  std::lock_guard lock(mu_);
  Chunk* c = nullptr;
  return stage_locked(block, offset, bytes, &c);
}

Result<void> ExecArena::stage_locked(ExecBlock block, size_t offset, std::span<const uint8_t> bytes,
                                     Chunk** chunk) {
  if (offset + bytes.size() > block.size)
    return make_error(Errc::out_of_range,
                      fmt::format("write of {} bytes at +{} overflows a {}-byte block at {:#x}",
                                  bytes.size(), offset, block.size, block.addr));
  Chunk* c = chunk_of(block.addr);
  if (!c || block.addr + block.size > c->base + c->filled)
    return make_error(Errc::invalid_argument,
                      fmt::format("{:#x} (+{}) is not a block of executable memory", block.addr, block.size));
  *chunk = c;
  return store(*c, block.addr + offset, bytes);
}

Result<void> ExecArena::seal_staged() {
  std::lock_guard lock(mu_);
  for (Chunk& c : chunks_)
    if (c.staged > c.sealed)
      UTRAMP_TRY(seal_to(c, std::min<uint64_t>(c.size, align_up(c.staged, page_size()))));
  return {};
}

size_t ExecArena::chunk_count() const {
  std::lock_guard lock(mu_);
  return chunks_.size();
}

size_t ExecArena::bytes_in_use() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const Chunk& c : chunks_) n += c.used;
  return n;
}

}  // namespace utramp::os
