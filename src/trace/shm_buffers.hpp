// Per-thread ring buffers in shared memory between the traced process (producers) and
// the CLI (the consumer), so that everything recorded survives the target's crash,
// _exit or SIGKILL: the CLI owns the mapping and drains it while the target runs and
// after it ends.
//
// Layout of the shared file (created by the CLI, an anonymous memfd, mapped by the agent
// in every traced process, forked children included):
//   Header (one page): magic, version, sizes, mode, an atomic allocator of buffers.
//   Buffer[0..max): each one page of control (producer head, consumer tail, lost
//   count, pid, tid, state) followed by a power-of-two ring of Events.
//
// Producer (the traced thread, async-signal-safe, no locks, no allocation): writes the
// event at head % N, then publishes head + 1 (release). Discard mode: when the ring is
// full the event is dropped and `lost` incremented (a `lost` event is written when room
// returns). Block mode: as discard, but a full ring makes the producer wait for the
// consumer's next pass (bounded: see wait_for_room()). Overwrite mode (flight recorder):
// always writes; the consumer detects what was overwritten from head and counts it as
// lost.
// Consumer: copies [tail, head), re-reads head, and discards what may have been
// overwritten during the copy (overwrite mode), then publishes tail. It keeps its own
// state (tail, what it reported) in its own memory and trusts nothing in the file: the
// traced program can write all of it (docs/trace-format.md, "The ring buffers").
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

// The values are the producer's (producer_impl.hpp: kModeDiscard...).
enum class BufferMode : uint32_t { discard = 0, overwrite = 1, block = 2 };

// The consumer's pace: after a drain pass that took at least this many events from one
// ring, the next pass starts at once; otherwise the consumer sleeps first (a millisecond,
// in the recorder). Not closer behind the producer: a consumer right behind it reads the
// cache lines it is writing, which doubled the cost of a call in a tight loop. And not a
// share of the ring alone: with a quarter of it, a ring four times larger let four times
// more pile up before the consumer stopped sleeping, and on a busy machine each sleep
// can last many milliseconds: a 1 Mi ring lost far more than the default one. A larger
// ring must never lose more, so the threshold never grows with the ring.
inline constexpr uint64_t drain_again_at(uint64_t events_per_buffer) noexcept {
  constexpr uint64_t kBatch = 8192;  // 256 KiB of events
  return events_per_buffer / 4 < kBatch ? events_per_buffer / 4 : kBatch;
}

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
  // CLI side: creates a new file at `path` (refusing one that exists, or a symbolic link
  // someone left there), owner-only, sized for `cfg`, and maps it.
  static Result<ShmBuffers> create(const std::string& path, const ShmConfig& cfg);
  // CLI side: the same in an anonymous file (memfd) that has no name to leave behind: it
  // is freed when the last process that maps it is gone, whatever happens to the CLI.
  // It is sealed against shrinking and growing, so no process can cut it under the
  // CLI's mapping (which would kill the CLI with SIGBUS). Agents open it through
  // agent_path(), a path valid while this object lives.
  static Result<ShmBuffers> create_anonymous(const ShmConfig& cfg);
  // Agent side: maps an existing file created by create() or create_anonymous().
  static Result<ShmBuffers> attach(const std::string& path);
  ShmBuffers() = default;
  ShmBuffers(ShmBuffers&&) noexcept;
  ShmBuffers& operator=(ShmBuffers&&) noexcept;
  ~ShmBuffers();

  // The path an agent passes to attach(): the file create() made, or /proc/PID/fd/N of
  // the CLI's descriptor of the anonymous one.
  const std::string& agent_path() const noexcept { return agent_path_; }

  // Agent side, when a recording ends in a running process (docs/attach.md): replaces
  // the mapping by zeroed anonymous memory of the same size, in one step (MAP_FIXED),
  // and closes the file. The rings' file is released; a thread still finishing a write
  // it began before the tracer moved on (ftrace::configure), or claiming a ring from
  // this object then, writes into memory no one reads, never into an unmapped page. The
  // replacement is never unmapped (no thread can be known to be done with it): it costs
  // address space and the pages such late writes touch, no more.
  void retire() noexcept;

  // Agent side: claims a free buffer for (pid, tid). Async-signal-safe (atomics only).
  // An invalid Producer when all are taken (the loss is counted in the header).
  Producer claim(uint32_t pid, uint32_t tid) noexcept;

  // CLI side: visits every buffer with new events: fn(pid, tid, events, lost_since_last).
  // Returns the number of events delivered, `lost` markers not counted. `events` carry
  // `lost` markers where losses happened (written by the producer in discard mode,
  // inserted here for what overwrite mode overwrote). `final`: the producers are gone
  // (the target ended), so losses not yet marked in a ring are marked at its end, except
  // in the rings of the processes `running` (still writing); closed rings are always
  // finished so and then recycled. One consumer at a time.
  //
  // Everything it reads from the shared file is the target's to write, stray writes
  // included: the layout it uses is its own copy (the CLI made the file), the owner of a
  // ring is taken once when it is claimed, the consumer's own state (how far it read,
  // what it reported) is kept here, not in the file, and every counter and position is
  // checked against what the protocol allows before it is used (see overwritten()).
  size_t drain(const std::function<void(uint32_t pid, uint32_t tid, std::span<const Event>,
                                        uint64_t lost)>& fn,
               bool final = false, std::span<const uint32_t> running = {});
  // CLI side: the most events the last drain() took from one ring (lost markers and
  // leaves count as one: slots), for drain_again_at().
  uint64_t largest_backlog() const noexcept { return largest_backlog_; }
  // CLI side: the processes owning rings still open (not closed by their thread).
  std::vector<uint32_t> producer_pids() const;
  // Buffers that could not be claimed (threads untraced for lack of buffers).
  uint64_t unclaimed() const noexcept;
  // CLI side: of the events drain() reported lost, those of calls made while their thread
  // ran the tracer's own code (Producer::drop(), a nested write), not for want of room.
  uint64_t nested_lost() const noexcept { return nested_lost_; }
  // CLI side, block mode: of the events drain() reported lost, those a producer dropped
  // after waiting in vain for a drain pass (Producer: wait_for_room()).
  uint64_t timed_out_lost() const noexcept { return timed_out_lost_; }
  BufferMode mode() const noexcept { return cfg_.mode; }
  ShmConfig config() const noexcept { return cfg_; }
  size_t file_size() const noexcept { return size_; }

  // CLI side: rings drain() found written by something other than the protocol (a
  // position going back or jumping past the ring, a counter going back or beyond what
  // the time allows, an unknown state): the first evidence of each, with the time of
  // the last event taken from it before. Its reading goes on from where the producer
  // is then; what was lost there is not counted (it cannot be known).
  struct Overwrite {
    uint32_t pid = 0, tid = 0;  // 0, 0: a ring whose owner was never known
    uint64_t time = 0;
    std::string what;
  };
  const std::vector<Overwrite>& overwritten() const noexcept { return overwrites_; }
  // CLI side: non-empty when the file's header no longer holds what the CLI wrote there
  // (what it found); the layout in use is the CLI's own copy either way.
  const std::string& header_overwritten() const noexcept { return header_overwritten_; }

  static constexpr uint32_t kShmVersion = 5;  // 5: block mode (passes, timed_out, gave_up)

 private:
  // The consumer's view of one ring, in the CLI's memory only.
  struct Ring {
    bool active = false;            // its owner is known (claimed, not yet recycled)
    bool reported = false;          // an overwrite of it was reported
    uint32_t pid = 0, tid = 0;      // the owner, as it was when the ring was claimed
    uint64_t tail = 0;              // events [0, tail) were taken
    uint64_t lost_reported = 0;     // the producer's `lost` already reported
    uint64_t nested_reported = 0;   // its `nested` already counted
    uint64_t timed_out_reported = 0;  // its `timed_out` already counted
    uint64_t passes = 0;            // drain passes over it (what Control::passes says)
    uint64_t marked_seen = 0;       // the last marker's running total
    uint64_t last_time = 0;         // time of the last event taken
    uint64_t seen_ns = 0;           // when it was first seen claimed (monotonic clock)
  };
  static Result<ShmBuffers> map_new(int fd, const std::string& name, const ShmConfig& cfg);
  struct Control* control(uint32_t i) const noexcept;
  void check_header();
  void overwrite(Ring& r, std::string what);

  void* base_ = nullptr;
  bool retired_ = false;  // retire(): base_ names memory that is never unmapped
  size_t size_ = 0;
  int fd_ = -1;                 // the anonymous file, held open (CLI side)
  std::string agent_path_;
  ShmConfig cfg_{};             // the layout: the CLI's own copy, or checked at attach()
  uint64_t stride_ = 0;         // control page + ring, bytes
  std::vector<Event> scratch_;  // drain()'s copy of one ring (consumer side only)
  std::vector<Ring> rings_;     // consumer side
  uint32_t used_ = 0;           // rings handed out, as far as drain() knows (only grows)
  uint64_t unclaimed_seen_ = 0; // the header's count, while the header was intact
  uint64_t nested_lost_ = 0;
  uint64_t timed_out_lost_ = 0;
  uint64_t largest_backlog_ = 0;
  std::vector<Overwrite> overwrites_;
  std::string header_overwritten_;
};

}  // namespace utramp::trace

#include "trace/producer_impl.hpp"  // IWYU pragma: export
