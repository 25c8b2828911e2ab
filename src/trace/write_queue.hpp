// The recorder's writing thread: the drain (tools/utramp/record_run.cpp) copies each
// ring's events into this queue and frees the ring at once; a thread of its own writes
// them with the TraceWriter, compressing them when the trace is compressed. The drain's
// pass over the rings then costs a copy, not the writes and the compression, so the
// drain frees ring space sooner when it gets only part of a CPU (docs/tracing.md,
// "Losses").
//
// Memory is bounded (max_bytes of queued events): when the writing thread falls behind
// by half of it, it stores the frames of compressed files instead of compressing them
// (TraceWriter::set_store_frames(): zstd frames of raw blocks, read as any other) until
// it has caught up; only if the disk itself cannot keep up does append() wait for room,
// and the rings take up the slack. Nothing queued is dropped: finish() writes it all.
//
// One drain thread calls append()/add_lost()/flush()/finish(); the TraceWriter is the
// writing thread's from construction until finish() returns, and the caller's again then.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "trace/event.hpp"

namespace utramp::trace {

class TraceWriter;

struct WriteQueueOptions {
  size_t max_bytes = size_t{64} << 20;  // events held at most (2 Mi events)
  // Test hook: each batch written without storing takes this much longer, as if the
  // compressor were that slow (forces the store path).
  uint64_t slow_write_ns = 0;
};

class WriteQueue {
 public:
  explicit WriteQueue(TraceWriter& writer, WriteQueueOptions o = {});
  ~WriteQueue();  // finish()
  WriteQueue(const WriteQueue&) = delete;
  WriteQueue& operator=(const WriteQueue&) = delete;

  // Copies EVENTS of one thread into the queue (waits while it holds max_bytes).
  void append(uint32_t pid, uint32_t tid, std::span<const Event> events);
  void add_lost(uint32_t pid, uint32_t tid, uint64_t n);
  // Asks for what the writer holds in memory to be written (TraceWriter::flush()).
  void flush();
  // Writes everything queued and ends the thread.
  void finish();
  // The most bytes of events it held at once, and how often append() waited for room.
  size_t peak_bytes() const;
  uint64_t waits() const;

 private:
  enum class Kind { events, lost, flush };
  struct Item {
    Kind kind = Kind::events;
    uint32_t pid = 0, tid = 0;
    uint64_t lost = 0;
    std::vector<Event> events;
  };
  void run();

  TraceWriter& writer_;
  const WriteQueueOptions opt_;
  mutable std::mutex mu_;
  std::condition_variable work_, room_;
  std::deque<Item> items_;
  std::vector<std::vector<Event>> spare_;  // buffers of written batches, for reuse
  size_t bytes_ = 0;        // events queued or being written
  size_t peak_ = 0;
  uint64_t waits_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace utramp::trace
