#include "patch/trap_table.hpp"

#include <sys/mman.h>

#include <cstdlib>

namespace utramp::patch {

namespace {
constexpr uint64_t kTargetMask = (uint64_t{1} << 48) - 1;
constexpr unsigned kRetShift = 48;  // 8 bits: return address minus site
constexpr unsigned kKindShift = 56;
}  // namespace

TrapTable& TrapTable::instance() {
  static TrapTable* t = new TrapTable();  // never destroyed: the handler may run at exit
  return *t;
}

TrapTable::TrapTable() {
  void* p = mmap(nullptr, kCapacity * sizeof(Entry), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) abort();
  entries_ = static_cast<Entry*>(p);  // zero pages: every entry empty
}

TrapTable::Entry* TrapTable::insert(uint64_t addr) {
  const uint64_t used = used_.load(std::memory_order_relaxed);
  if (used * 2 >= kCapacity) return nullptr;
  for (uint64_t i = slot_of(addr);; i = (i + 1) & (kCapacity - 1)) {
    Entry& e = entries_[i];
    const uint64_t a = e.addr.load(std::memory_order_relaxed);
    if (a == addr) return &e;
    if (a == 0) {
      e.emu.store(0, std::memory_order_relaxed);
      // Pairs with the acquire load in find(): the entry is complete when visible.
      e.addr.store(addr, std::memory_order_release);
      // After the entry: a find() that sees the count sees the entry's address.
      used_.store(used + 1, std::memory_order_release);
      return &e;
    }
  }
}

TrapTable::Entry* TrapTable::find(uint64_t addr) const noexcept {
  if (used_.load(std::memory_order_acquire) == 0) return nullptr;
  for (uint64_t i = slot_of(addr), n = 0; n < kCapacity; i = (i + 1) & (kCapacity - 1), ++n) {
    Entry& e = entries_[i];
    const uint64_t a = e.addr.load(std::memory_order_acquire);
    if (a == addr) return &e;
    if (a == 0) return nullptr;
  }
  return nullptr;
}

uint64_t TrapTable::pack(const Emulation& e, uint64_t site) noexcept {
  if (e.kind == Emulation::Kind::none) return 0;
  const uint64_t ret = e.kind == Emulation::Kind::call ? (e.return_to - site) & 0xff : 0;
  return (uint64_t(e.kind) << kKindShift) | (ret << kRetShift) | (e.target & kTargetMask);
}

Emulation TrapTable::unpack(uint64_t w, uint64_t site) noexcept {
  Emulation e;
  e.kind = static_cast<Emulation::Kind>(w >> kKindShift);
  e.target = w & kTargetMask;
  if (e.kind == Emulation::Kind::call) e.return_to = site + ((w >> kRetShift) & 0xff);
  return e;
}

}  // namespace utramp::patch
