// The recorder's writing thread (write_queue.hpp).
#include "trace/write_queue.hpp"

#include <time.h>

#include <algorithm>

#include "trace/trace_dir.hpp"

namespace utramp::trace {

WriteQueue::WriteQueue(TraceWriter& writer, WriteQueueOptions o) : writer_(writer), opt_(o) {
  thread_ = std::thread([this] { run(); });
}

WriteQueue::~WriteQueue() { finish(); }

void WriteQueue::append(uint32_t pid, uint32_t tid, std::span<const Event> events) {
  if (events.empty()) return;
  const size_t n = events.size_bytes();
  Item it;
  it.pid = pid;
  it.tid = tid;
  {
    std::unique_lock lk(mu_);
    if (bytes_ > 0 && bytes_ + n > opt_.max_bytes) {
      ++waits_;
      room_.wait(lk, [&] { return bytes_ == 0 || bytes_ + n <= opt_.max_bytes; });
    }
    bytes_ += n;
    peak_ = std::max(peak_, bytes_);
    if (!spare_.empty()) {
      it.events = std::move(spare_.back());
      spare_.pop_back();
    }
  }
  // The copy outside the lock: the writing thread takes batches meanwhile.
  it.events.assign(events.begin(), events.end());
  {
    std::lock_guard lk(mu_);
    items_.push_back(std::move(it));
  }
  work_.notify_one();
}

void WriteQueue::add_lost(uint32_t pid, uint32_t tid, uint64_t n) {
  if (n == 0) return;
  {
    std::lock_guard lk(mu_);
    Item it;
    it.kind = Kind::lost;
    it.pid = pid;
    it.tid = tid;
    it.lost = n;
    items_.push_back(std::move(it));
  }
  work_.notify_one();
}

void WriteQueue::flush() {
  {
    std::lock_guard lk(mu_);
    Item it;
    it.kind = Kind::flush;
    items_.push_back(std::move(it));
  }
  work_.notify_one();
}

void WriteQueue::finish() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_.notify_one();
  if (thread_.joinable()) thread_.join();
}

size_t WriteQueue::peak_bytes() const {
  std::lock_guard lk(mu_);
  return peak_;
}

uint64_t WriteQueue::waits() const {
  std::lock_guard lk(mu_);
  return waits_;
}

void WriteQueue::run() {
  std::unique_lock lk(mu_);
  for (;;) {
    work_.wait(lk, [&] { return stop_ || !items_.empty(); });
    if (items_.empty()) {  // stopped, everything written
      writer_.set_store_frames(false);  // what finish() flushes is compressed
      return;
    }
    Item it = std::move(items_.front());
    items_.pop_front();
    // Behind by half the queue (this batch included): store rather than compress until
    // caught up, so that the queue never has to make the drain wait for the compressor.
    const bool store = bytes_ >= opt_.max_bytes / 2;
    lk.unlock();
    switch (it.kind) {
      case Kind::events: {
        writer_.set_store_frames(store);
        // A write that fails cuts the trace (TraceWriter): said at the end.
        (void)writer_.append(it.pid, it.tid, it.events);
        if (!store && opt_.slow_write_ns) {
          const timespec ts{static_cast<time_t>(opt_.slow_write_ns / 1'000'000'000),
                            static_cast<long>(opt_.slow_write_ns % 1'000'000'000)};
          ::nanosleep(&ts, nullptr);
        }
        break;
      }
      case Kind::lost: writer_.add_lost(it.pid, it.tid, it.lost); break;
      case Kind::flush: (void)writer_.flush(); break;
    }
    lk.lock();
    if (it.kind == Kind::events) {
      bytes_ -= it.events.size() * sizeof(Event);
      // Kept for reuse while their capacity fits in the queue's bound (fresh pages cost
      // more than the copy into them).
      size_t kept = 0;
      for (const auto& v : spare_) kept += v.capacity() * sizeof(Event);
      if (kept + it.events.capacity() * sizeof(Event) <= opt_.max_bytes) {
        it.events.clear();
        spare_.push_back(std::move(it.events));
      }
      room_.notify_one();
    }
  }
}

}  // namespace utramp::trace
