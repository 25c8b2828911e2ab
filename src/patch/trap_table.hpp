// Sites the patcher has touched, and how a thread trapped on one is sent on.
//
// Read from the SIGTRAP handler, so lookups are lock-free and allocation-free: a fixed
// open-addressing table, insert-only (an address, once in, stays), each entry one
// atomic word for the emulation. Writers are serialised by the patcher.
#pragma once

#include <atomic>
#include <cstdint>

#include "patch/patcher.hpp"

namespace utramp::patch {

class TrapTable {
 public:
  static constexpr unsigned kBits = 20;  // 1M entries, 16 MiB reserved, touched lazily
  static constexpr uint64_t kCapacity = uint64_t{1} << kBits;

  struct Entry {
    std::atomic<uint64_t> addr;
    std::atomic<uint64_t> emu;  // packed Emulation, 0 when no patch is in flight
  };

  static TrapTable& instance();

  // Entry for `addr`, created if absent (writers only). Null when full.
  Entry* insert(uint64_t addr);
  // Entry for `addr` or null; async-signal-safe. In a table nothing was ever inserted
  // into it reads no entry (a process that is alone patches without int3s and asks for
  // each site: a read of each site's slot faulted in a zero page per 256 slots, 59 page
  // faults for a 1,000-function program).
  Entry* find(uint64_t addr) const noexcept;
  // Entries inserted (never removed: a withdrawn emulation leaves its address).
  uint64_t size() const noexcept { return used_.load(std::memory_order_acquire); }

  static uint64_t pack(const Emulation& e, uint64_t site) noexcept;
  static Emulation unpack(uint64_t w, uint64_t site) noexcept;

 private:
  TrapTable();
  // By address, a slot per 16 bytes of text (wrapping every 16 MiB): the sites of one
  // object land in neighbouring entries, a page of them per 4 KiB of slots, where a
  // scattering hash gave each site a page of its own to fault in (872 of the 6,689 page
  // faults of recording a 1,000-function program; docs/benchmarks.md, "Start-up").
  // Sites closer than 16 bytes share a slot's neighbourhood (linear probing).
  static uint64_t slot_of(uint64_t addr) noexcept { return (addr >> 4) & (kCapacity - 1); }
  Entry* entries_ = nullptr;
  std::atomic<uint64_t> used_{0};  // written by writers only (under the patch lock)
};

}  // namespace utramp::patch
