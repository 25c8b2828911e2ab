// Executable memory near a target address.
//
// Chunks are anonymous mappings placed inside a caller-given window (in practice the
// ±2 GB a rel32 reaches from a site). A chunk is created read-write and not executable;
// the part blocks are handed out from is filled with int3 while nothing can execute it,
// then sealed read+exec for good (the fill moves ahead of the blocks, 64 KiB at a time:
// memset, then mprotect; a chunk's pages no block reached are never touched, and the
// part not yet reached stays read-write and never executable, so nothing is handed out
// there). Small blocks are packed into chunks. Code is written into the sealed part
// through os::write_text, so no page is ever writable and executable at once. Every byte
// handed out is int3 until written, and a freed block is refilled with int3 so that a
// stale jump into it traps instead of running garbage.
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

  static ExecArena& instance();

  // A block of `size` bytes lying entirely inside [lo, hi).
  Result<ExecBlock> allocate(size_t size, uint64_t lo, uint64_t hi);
  void free(ExecBlock block);
  // Gives back the end of a block none of whose bytes past `size` were written: an
  // image's block is allocated at its size bound before its code is made.
  void shrink(ExecBlock& block, size_t size);
  // Copies `bytes` into the block at `offset`.
  Result<void> write(ExecBlock block, size_t offset, std::span<const uint8_t> bytes);

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
    size_t filled = 0;  // [0, filled) is int3 or code, read+exec; past it, read-write and
                        // never executable, pages not touched
  };
  // Moves c's fill to cover [c.base, end).
  static Result<void> fill_to(Chunk& c, uint64_t end);
  // Returns a block's range to c's free list (its bytes as they are).
  static void give_back(Chunk& c, ExecBlock block);
  Result<Chunk*> new_chunk(size_t size, uint64_t lo, uint64_t hi);
  // In a gap of `maps`; null when there is none or each is taken by a mapping `maps`
  // does not show.
  Result<Chunk*> new_chunk_in(const std::vector<Mapping>& maps, size_t size, uint64_t lo,
                              uint64_t hi);
  static bool take(Chunk& c, size_t size, uint64_t lo, uint64_t hi, uint64_t* out);

  mutable std::mutex mu_;
  std::vector<Chunk> chunks_;
};

}  // namespace utramp::os
