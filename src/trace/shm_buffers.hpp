// Per-thread ring buffers in shared memory between the traced process (producers) and
// the CLI (the consumer), so that everything recorded survives the target's crash,
// _exit or SIGKILL: the CLI owns the mapping and drains it while the target runs and
// after it ends.
//
// Layout of the shared file (created by the CLI, mapped by the agent in every traced
// process, forked children included):
//   Header (one page): magic, version, sizes, mode, an atomic allocator of buffers.
//   Buffer[0..max): each one page of control (producer head, consumer tail, lost
//   count, pid, tid, state) followed by a power-of-two ring of Events.
//
// Producer (the traced thread, async-signal-safe, no locks, no allocation): writes the
// event at head % N, then publishes head + 1 (release). Discard mode: when the ring is
// full the event is dropped and `lost` incremented (a `lost` event is written when room
// returns). Overwrite mode (flight recorder): always writes; the consumer detects what
// was overwritten from head and counts it as lost.
// Consumer: copies [tail, head), re-reads head, and discards what may have been
// overwritten during the copy (overwrite mode), then publishes tail.
//
// Rules for the agent (the full protocol is in shm_buffers.cpp and docs/trace-format.md):
//   - one Producer per thread; write() is re-entrant in the sense that a signal handler
//     that writes to the same ring while a write() is in progress on it drops its event
//     and counts it lost (it never corrupts the ring nor blocks);
//   - after fork() the child must claim() its own buffer before writing: the Producer
//     it inherited names the parent's ring;
//   - close() when the thread ends lets the CLI recycle the buffer for a later thread.
// Loss accounting is exact: for every ring, events delivered by drain() plus the sum of
// the `lost` counts passed to drain()'s callback equal the events written.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "trace/event.hpp"

namespace utramp::trace {

enum class BufferMode : uint32_t { discard = 0, overwrite = 1 };

struct ShmConfig {
  uint32_t max_buffers = 256;        // threads (all processes) the trace can hold
  uint32_t events_per_buffer = 1u << 16;  // power of two
  BufferMode mode = BufferMode::discard;
};

// One thread's ring, as the producer sees it.
class Producer {
 public:
  // Appends one event. Never blocks; counts a loss when it cannot write. Inline
  // (producer_impl.hpp): the tracer's fast path must not call out.
  inline void write(const Event& e) noexcept;
  // An entry that may become a `leaf`: written but not published (Control::staged),
  // so that complete_leaf() can turn it into one event when its exit comes next. Any
  // other write publishes it first; so does close(), and a consumer that finds the
  // producer gone takes it. Returns false when the event was dropped.
  inline bool stage(const Event& entry) noexcept;
  // The exit of the staged entry of `func` made at `time`: the slot becomes a `leaf`
  // with `exit_time` and is published. False (nothing written) when the staged slot is
  // not that entry; the caller then writes an ordinary exit.
  inline bool complete_leaf(uint64_t func, uint64_t time, uint64_t exit_time) noexcept;
  // The common case of write() (stage: of stage()) for the tracer's fast path, which must
  // stay small: no flags, no aux. False, with nothing written and nothing counted,
  // when anything is unusual (a write in progress, a loss to mark, a ring that looks
  // full); the caller then takes the general path.
  inline bool put_fast(uint64_t time, uint64_t addr, uint64_t data, uint16_t depth,
                       EventType type, bool stage) noexcept;
  // Counts one event lost without writing it (an event the tracer cannot record where
  // it happened: a call inside the tracer's own code). Async-signal-safe: atomic adds.
  inline void drop() noexcept;
  bool valid() const noexcept { return ctl_ != nullptr; }
  uint64_t lost() const noexcept;
  // Where its fields are, for code generated to do put_fast()'s work inline (the
  // tracer's images): byte offsets in a Producer, and in the control page.
  struct Layout {
    int32_t ctl, ring, mask, tail_seen;                    // Producer
    int32_t head, busy, pending, staged;                   // Control
  };
  static Layout layout() noexcept;
  // Marks the ring as finished (thread exit).
  void close() noexcept;

  // For repairing a write that a signal handler left by longjmp (ftrace/graph.cpp:
  // tracer_held): the staged slot, if an entry is staged, and the last published event.
  // Read by the ring's own thread only. Async-signal-safe.
  bool staged_event(Event* out) const noexcept;
  bool last_published(Event* out) const noexcept;
  // Releases `busy`; keeps the staged slot (as an entry) when `keep_staged`, else
  // forgets it (the next write takes that slot).
  void release_abandoned(bool keep_staged) noexcept;

 private:
  friend class ShmBuffers;
  struct Control* ctl_ = nullptr;
  Event* ring_ = nullptr;
  uint64_t mask_ = 0;
  uint32_t mode_ = 0;
  // The consumer's tail as last read: re-read only when the ring looks full, so a
  // write does not pull the consumer's cache line every time.
  uint64_t tail_seen_ = 0;
};

class ShmBuffers {
 public:
  // CLI side: creates the file at `path` (truncating), sized for `cfg`, and maps it.
  static Result<ShmBuffers> create(const std::string& path, const ShmConfig& cfg);
  // Agent side: maps an existing file created by create().
  static Result<ShmBuffers> attach(const std::string& path);
  ShmBuffers() = default;
  ShmBuffers(ShmBuffers&&) noexcept;
  ShmBuffers& operator=(ShmBuffers&&) noexcept;
  ~ShmBuffers();

  // Agent side: claims a free buffer for (pid, tid). Async-signal-safe (atomics only).
  // An invalid Producer when all are taken (the loss is counted in the header).
  Producer claim(uint32_t pid, uint32_t tid) noexcept;

  // CLI side: visits every buffer with new events: fn(pid, tid, events, lost_since_last).
  // Returns the number of events delivered, `lost` markers not counted. `events` carry
  // `lost` markers where losses happened (written by the producer in discard mode,
  // inserted here for what overwrite mode overwrote). `final`: the producers are gone
  // (the target ended), so losses not yet marked in a ring are marked at its end; closed
  // rings are always finished so and then recycled. One consumer at a time.
  size_t drain(const std::function<void(uint32_t pid, uint32_t tid, std::span<const Event>,
                                        uint64_t lost)>& fn,
               bool final = false);
  // CLI side: the processes owning rings still open (not closed by their thread).
  std::vector<uint32_t> producer_pids() const;
  // Buffers that could not be claimed (threads untraced for lack of buffers).
  uint64_t unclaimed() const noexcept;
  // CLI side: of the events drain() reported lost, those of calls made while their thread
  // ran the tracer's own code (Producer::drop(), a nested write), not for want of room.
  uint64_t nested_lost() const noexcept { return nested_lost_; }
  BufferMode mode() const noexcept;
  ShmConfig config() const noexcept;
  size_t file_size() const noexcept { return size_; }

  static constexpr uint32_t kShmVersion = 3;  // 3: markers carry running totals

 private:
  void* base_ = nullptr;
  size_t size_ = 0;
  std::vector<Event> scratch_;  // drain()'s copy of one ring (consumer side only)
  uint64_t nested_lost_ = 0;
};

}  // namespace utramp::trace

#include "trace/producer_impl.hpp"  // IWYU pragma: export
