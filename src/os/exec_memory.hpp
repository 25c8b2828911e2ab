// Executable memory near a target address.
//
// Chunks are anonymous mappings placed inside a caller-given window (in practice the
// ±2 GB a rel32 reaches from a site). Small blocks are packed into chunks. A chunk keeps
// two marks, both only ever moving up:
//
//   [0, sealed)       read+exec for good: int3 or code;
//   [sealed, filled)  read-write, never executable: int3 (memset by allocate(), 64 KiB
//                     ahead of the blocks at a time, its pages made present first by
//                     one madvise(MADV_POPULATE_WRITE) rather than a fault each) or
//                     code staged there;
//   [filled, size)    read-write, never executable, pages not touched; nothing is
//                     handed out there.
//
// So no page is ever writable and executable at once. Code goes into a block by a
// plain store where the block lies past its chunk's `sealed` mark, and through
// os::write_text (/proc/self/mem: slower, a system call and the kernel's page walk)
// where it is already sealed. write() then seals up to the page end of its last byte:
// the block is executable when it returns. stage() does not seal: a batch stages every
// block's code as it is emitted and calls seal_staged() once before anything can reach
// any of it (an attach of 1,000 functions kept 1.1 MB of code on the heap to write it
// through /proc/self/mem). Until it is sealed a block cannot run at all: a jump into it
// faults. Sealing a chunk up to a mark also seals the blocks below it that others were
// handed and have not written yet; their writes then take the slower way, which is
// equally correct.
//
// Every byte handed out is int3 until written, and a freed block is refilled with int3
// so that a stale jump into it traps instead of running garbage.
//
// Huge chunks: a window's first chunk is small (kChunkSize) and filled as blocks reach
// it; when a window needs another, that one is kHugeChunk, aligned to it, advised
// MADV_HUGEPAGE and filled whole at once: one page fault for 2 MiB where 4 KiB pages
// fault 512 times (an attach of 1,000 functions, 1.1 MB of code, took some 300 faults of
// several µs each in a VM). The cost is 2 MiB resident for a process whose trampolines
// outgrew the first chunk. Sealing parts of it splits the huge mapping into small ones;
// the memory stays, nothing faults again.
//
// The shared copy of the mappings (os::maps_copy) shows a whole chunk read+exec from
// its creation (os::note_mapping): the patcher's check that a patch lies in executable
// memory believes it. That is true of every block whose code is written and sealed,
// and the patcher is only ever given such blocks (a batch seals before its patch
// operations run); the kernel's mappings, read again, show the truth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "common/result.hpp"

namespace utramp::os {

struct Mapping;  // os/maps.hpp

struct ExecBlock {
  uint64_t addr = 0;
  size_t size = 0;
  explicit operator bool() const { return addr != 0; }
};

class ExecArena {
 public:
  static constexpr size_t kChunkSize = 256 * 1024;
  static constexpr size_t kAlign = 16;
  static constexpr size_t kFillStep = 64 * 1024;
  // A window's chunks after its first (header comment, "Huge chunks").
  static constexpr size_t kHugeChunk = 2 * 1024 * 1024;
  // Whether chunks after a window's first are huge: transparent huge pages are on for
  // madvise'd regions, and UTRAMP_NO_HUGE_CHUNKS is not set.
  static bool huge_pages_usable();

  static ExecArena& instance();

  // A block of `size` bytes lying entirely inside [lo, hi).
  Result<ExecBlock> allocate(size_t size, uint64_t lo, uint64_t hi);
  // Refills the block with int3 and gives it back.
  void free(ExecBlock block);
  // Gives back the end of a block none of whose bytes past `size` were written: an
  // image's block is allocated at its size bound before its code is made.
  void shrink(ExecBlock& block, size_t size);
  // Copies `bytes` into the block at `offset`; the bytes are executable on return.
  Result<void> write(ExecBlock block, size_t offset, std::span<const uint8_t> bytes);
  // Copies `bytes` into the block at `offset`, leaving them to the next seal_staged()
  // (or a write() into the same chunk past them): not yet executable.
  Result<void> stage(ExecBlock block, size_t offset, std::span<const uint8_t> bytes);
  // Seals every chunk up to the page end of the last byte staged in it.
  Result<void> seal_staged();

  size_t chunk_count() const;
  // Held across fork() (see tramp/trampoline.cpp).
  void fork_lock() { mu_.lock(); }
  void fork_unlock() { mu_.unlock(); }
  size_t bytes_in_use() const;

 private:
  struct Range { uint64_t off, len; };
  struct Chunk {
    uint64_t base = 0;
    size_t size = 0;
    std::vector<Range> free;  // sorted by offset, coalesced
    size_t used = 0;
    size_t sealed = 0;  // the marks of the header comment: sealed <= staged <= filled
    size_t staged = 0;  // end of the bytes stage() stored past `sealed` (else = sealed)
    size_t filled = 0;
  };
  // Moves c's fill to cover [c.base, end).
  static void fill_to(Chunk& c, uint64_t end);
  // Makes [c.base, c.base + to) read+exec (to: page aligned, at most c.filled).
  static Result<void> seal_to(Chunk& c, size_t to);
  // Stores `bytes` at addr of c: a plain store past c.sealed, os::write_text below it.
  static Result<void> store(Chunk& c, uint64_t addr, std::span<const uint8_t> bytes);
  Chunk* chunk_of(uint64_t addr);
  // stage() under mu_; *chunk: the block's.
  Result<void> stage_locked(ExecBlock block, size_t offset, std::span<const uint8_t> bytes,
                            Chunk** chunk);
  // Returns a block's range to c's free list (its bytes as they are).
  static void give_back(Chunk& c, ExecBlock block);
  Result<Chunk*> new_chunk(size_t size, uint64_t lo, uint64_t hi);
  // In a gap of `maps`; null when there is none or each is taken by a mapping `maps`
  // does not show.
  Result<Chunk*> new_chunk_in(const std::vector<Mapping>& maps, size_t size, uint64_t lo,
                              uint64_t hi, bool huge);
  static bool take(Chunk& c, size_t size, uint64_t lo, uint64_t hi, uint64_t* out);

  mutable std::mutex mu_;
  std::vector<Chunk> chunks_;
};

}  // namespace utramp::os
