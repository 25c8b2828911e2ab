// The producer's side of a ring (included by shm_buffers.hpp): the control page and
// Producer::write(), inline and always inlined, so that the tracer's fast path — built
// with general registers only and calling nothing (ftrace/graph_fast.cpp) — gets its
// own copy, and no translation unit ever calls an out-of-line one compiled otherwise.
// The protocol is described at the top of shm_buffers.cpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "trace/event.hpp"

namespace utramp::trace {

// One page in front of each ring. Lines: the producer's (written on every event), the
// owner's identity, the consumer's position (the producer reads it for room). The
// consumer keeps the rest of its state in its own memory (ShmBuffers::Ring): the traced
// program can write anything here.
struct Control {
  std::atomic<uint64_t> head;     // events [0, head) are published (indices, not slots)
  std::atomic<uint64_t> lost;     // events the producer dropped, cumulative
  std::atomic<uint64_t> pending;  // drops not yet marked by a `lost` event (discard mode)
  std::atomic<uint32_t> busy;     // a write() is in progress on this ring
  std::atomic<uint32_t> staged;   // slot `head` holds an entry not yet published
  std::atomic<uint64_t> nested;   // of `lost`: events of calls made inside the tracer
  std::atomic<uint64_t> timed_out;  // of `lost` (block mode): dropped after waiting in vain
  std::atomic<uint64_t> gave_up;  // block mode: passes + 1 when the producer last gave up
  alignas(64) std::atomic<uint32_t> state;
  std::atomic<uint32_t> pid;
  std::atomic<uint32_t> tid;
  alignas(64) std::atomic<uint64_t> tail;  // consumer: events [0, tail) were taken
  std::atomic<uint64_t> passes;            // consumer: drain passes over this ring so far
};
static_assert(sizeof(Control) <= 4096);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(offsetof(Event, depth) == 24 && offsetof(Event, type) == 26 &&
                  offsetof(Event, flags) == 27 && offsetof(Event, aux) == 28,
              "event_word3() and complete_leaf() assemble the fourth word");

#define UTRAMP_ALWAYS_INLINE inline __attribute__((always_inline))

// The fourth word of an Event (depth, type, flags, aux), assembled in a register: a
// memcpy of the Event made the compiler store depth as 16 bits and reload the word as 64,
// a failed store-to-load forward that cost more than the rest of a traced call.
UTRAMP_ALWAYS_INLINE uint64_t event_word3(const Event& e) noexcept {
  return uint64_t{e.depth} | uint64_t{e.type} << 16 | uint64_t{e.flags} << 24 |
         uint64_t{e.aux} << 32;
}

UTRAMP_ALWAYS_INLINE void store_slot(Event* slot, const Event& e) noexcept {
  auto* p = reinterpret_cast<uint64_t*>(slot);
  std::atomic_ref<uint64_t>(p[0]).store(e.time, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(p[1]).store(e.addr, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(p[2]).store(e.data, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(p[3]).store(event_word3(e), std::memory_order_relaxed);
}

UTRAMP_ALWAYS_INLINE Event lost_event(uint64_t n, uint64_t time, uint16_t depth) noexcept {
  Event e{};
  e.time = time;
  e.data = n;
  e.depth = depth;
  e.type = static_cast<uint8_t>(EventType::lost);
  return e;
}

// The buffer modes as the producer holds them (BufferMode in shm_buffers.hpp): discard
// and block both write `lost` markers and make leaves; they differ only when the ring is
// full.
inline constexpr uint32_t kModeDiscard = 0, kModeOverwrite = 1, kModeBlock = 2;

// Block mode, the ring full (the caller holds busy): waits until the consumer has made
// room for `need` more events at `h` in a ring of `size`, and returns true, with
// `tail_seen` updated. False — drop the event — when the consumer has made no drain
// pass over this ring for kBlockWaitNs (a recorder killed, stopped, or stuck), and at
// once when it gave up already and the consumer has made no pass since: a program whose
// recorder is gone slows down by that wait once per thread, not once per event.
// Out of line, never in the fast path (graph_fast.cpp does not reach it); system calls
// made directly: libc may be traced. Async-signal-safe: no lock, no allocation.
bool wait_for_room(Control* c, uint64_t h, uint64_t need, uint64_t size,
                   uint64_t& tail_seen) noexcept;
inline constexpr uint64_t kBlockWaitNs = 1'000'000'000;

// Publishes a staged entry (the caller holds busy): head moves over it.
UTRAMP_ALWAYS_INLINE void publish_staged(Control* c) noexcept {
  if (c->staged.load(std::memory_order_relaxed) == 0) return;
  c->head.store(c->head.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  c->staged.store(0, std::memory_order_relaxed);
}

// Writes `e` at head; publishes it unless `stage`. False when it was dropped.
UTRAMP_ALWAYS_INLINE bool producer_put(Control* c, Event* ring, uint64_t mask, uint32_t mode,
                                       uint64_t& tail_seen, const Event& e, bool stage) noexcept {
  if (c->busy.load(std::memory_order_relaxed) != 0) {
    // A signal handler interrupted a write() on this ring: writing now would race with
    // the interrupted one for the same slot, so the event is dropped and counted (in
    // block mode too: waiting here would wait for the interrupted write, which cannot
    // go on before the handler returns).
    c->nested.fetch_add(1, std::memory_order_relaxed);
    c->lost.fetch_add(1, std::memory_order_relaxed);
    if (mode != kModeOverwrite) c->pending.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  c->busy.store(1, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);

  publish_staged(c);
  uint64_t h = c->head.load(std::memory_order_relaxed);
  const bool mark = c->pending.load(std::memory_order_relaxed) != 0;
  bool put = true;
  if (mode != kModeOverwrite) {
    const uint64_t need = mark ? 2 : 1;
    if (h - tail_seen + need > mask + 1)
      tail_seen = c->tail.load(std::memory_order_acquire);  // pairs with drain()'s release
    if (h - tail_seen + need > mask + 1 &&
        (mode != kModeBlock || !wait_for_room(c, h, need, mask + 1, tail_seen))) {
      if (mode == kModeBlock) c->timed_out.fetch_add(1, std::memory_order_relaxed);
      c->lost.fetch_add(1, std::memory_order_relaxed);
      c->pending.fetch_add(1, std::memory_order_relaxed);
      put = false;
    } else {
      if (mark) {
        // A marker carries the running total of drops (`lost`), which the consumer turns
        // into a count since the previous marker: however this write is cut short (a
        // signal handler that longjmps out of it), a drop is never counted twice or
        // left out — a marker published twice counts nothing the second time, and one
        // never published is covered by the next or by the consumer at the end.
        c->pending.store(0, std::memory_order_relaxed);
        store_slot(&ring[h & mask],
                   lost_event(c->lost.load(std::memory_order_relaxed), e.time, e.depth));
        ++h;
        if (stage) c->head.store(h, std::memory_order_release);
      }
      store_slot(&ring[h & mask], e);
      if (stage) c->staged.store(1, std::memory_order_relaxed);
      else c->head.store(h + 1, std::memory_order_release);  // pairs with drain()'s acquire
    }
  } else {
    // Overwrite mode writes no `lost` markers (`pending` stays 0): the consumer counts an
    // overwritten slot as one lost event, so a slot must always hold one event — a
    // marker overwritten in turn would count as one while the drops it carried went
    // unmarked. The consumer marks the drops (`lost`) with what was overwritten.
    std::atomic_thread_fence(std::memory_order_release);  // pairs with drain()'s acquire fence
    store_slot(&ring[h & mask], e);
    if (stage) c->staged.store(1, std::memory_order_relaxed);
    else c->head.store(h + 1, std::memory_order_release);
  }

  std::atomic_signal_fence(std::memory_order_seq_cst);
  c->busy.store(0, std::memory_order_relaxed);
  return put;
}

UTRAMP_ALWAYS_INLINE void Producer::drop() noexcept {
  if (ctl_ == nullptr) return;
  ctl_->nested.fetch_add(1, std::memory_order_relaxed);
  ctl_->lost.fetch_add(1, std::memory_order_relaxed);
  // Discard and block modes: marked by the next write. Overwrite mode: by the consumer.
  if (mode_ != kModeOverwrite) ctl_->pending.fetch_add(1, std::memory_order_relaxed);
}

UTRAMP_ALWAYS_INLINE void Producer::write(const Event& e) noexcept {
  if (ctl_ != nullptr) producer_put(ctl_, ring_, mask_, mode_, tail_seen_, e, false);
}

UTRAMP_ALWAYS_INLINE bool Producer::stage(const Event& entry) noexcept {
  // Overwrite mode counts what it loses in slots, so it makes no leaves: a lost slot
  // is then always one event.
  return ctl_ != nullptr &&
         producer_put(ctl_, ring_, mask_, mode_, tail_seen_, entry, mode_ != kModeOverwrite);
}

UTRAMP_ALWAYS_INLINE bool Producer::complete_leaf(uint64_t func, uint64_t time,
                                                  uint64_t exit_time) noexcept {
  Control* c = ctl_;
  if (c == nullptr || c->busy.load(std::memory_order_relaxed) != 0) return false;
  c->busy.store(1, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // The ring's state is read only now that busy is held: a signal handler that ran
  // between the check of busy and its store may have published the staged entry and
  // written more.
  const uint64_t h = c->head.load(std::memory_order_relaxed);
  auto* w = reinterpret_cast<uint64_t*>(&ring_[h & mask_]);
  // Ours only if it is the entry of this call (a signal handler's call that was left by
  // longjmp could have staged its own).
  const bool ours = c->staged.load(std::memory_order_relaxed) != 0 &&
                    std::atomic_ref<uint64_t>(w[0]).load(std::memory_order_relaxed) == time &&
                    std::atomic_ref<uint64_t>(w[1]).load(std::memory_order_relaxed) == func;
  if (ours) {
    // Word 3 holds depth (16 bits), type, flags and aux: only the type changes.
    uint64_t w3 = std::atomic_ref<uint64_t>(w[3]).load(std::memory_order_relaxed);
    w3 = (w3 & ~(uint64_t{0xff} << 16)) | (uint64_t{static_cast<uint8_t>(EventType::leaf)} << 16);
    std::atomic_ref<uint64_t>(w[2]).store(exit_time, std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(w[3]).store(w3, std::memory_order_relaxed);
    c->head.store(h + 1, std::memory_order_release);
    c->staged.store(0, std::memory_order_relaxed);
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  c->busy.store(0, std::memory_order_relaxed);
  return ours;
}

UTRAMP_ALWAYS_INLINE bool Producer::put_fast(uint64_t time, uint64_t addr, uint64_t data,
                                             uint16_t depth, EventType type, bool stage) noexcept {
  Control* c = ctl_;
  if (c->busy.load(std::memory_order_relaxed) != 0) return false;
  c->busy.store(1, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // head, staged and pending are read only now that busy is held: a signal handler
  // that ran between the check of busy and its store may have written events, and a
  // head read before it would be stored back below it (events overwritten, a head
  // going backwards that the consumer has already passed).
  const uint64_t h =
      c->head.load(std::memory_order_relaxed) + c->staged.load(std::memory_order_relaxed);
  const bool discard = mode_ != kModeOverwrite;  // or block: the same but when full
  // A loss to mark, or a ring that may be full (tail is re-read there, and block mode
  // waits): write() does it.
  if (c->pending.load(std::memory_order_relaxed) != 0 || (discard && h - tail_seen_ > mask_)) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    c->busy.store(0, std::memory_order_relaxed);
    return false;
  }
  stage = stage && discard;
  c->head.store(h, std::memory_order_release);  // publishes a staged entry, if any
  std::atomic_thread_fence(std::memory_order_release);  // overwrite mode: see write()
  auto* p = reinterpret_cast<uint64_t*>(&ring_[h & mask_]);
  std::atomic_ref<uint64_t>(p[0]).store(time, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(p[1]).store(addr, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(p[2]).store(data, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(p[3]).store(uint64_t{depth} | uint64_t{static_cast<uint8_t>(type)} << 16,
                                        std::memory_order_relaxed);
  c->staged.store(stage ? 1 : 0, std::memory_order_relaxed);
  if (!stage) c->head.store(h + 1, std::memory_order_release);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  c->busy.store(0, std::memory_order_relaxed);
  return true;
}

}  // namespace utramp::trace
