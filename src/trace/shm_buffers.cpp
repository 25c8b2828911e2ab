// Per-thread rings in one shared file. The protocol, per ring:
//
//   producer (one thread; signal handlers of that thread may call in):
//     busy = 1                       a nested write (signal handler) sees it and drops
//     discard:   room = N - (head - tail)            tail: acquire, pairs with the
//                                                    consumer's release after its copy
//                no room → lost++, pending++ (the drop is marked later)
//                pending → pending = 0, then first a `lost` event carrying `lost`
//                (the running total; the consumer turns it into a count since its
//                previous marker, so a write cut short by a signal handler's
//                longjmp — the marker published twice, or not at all — still counts
//                every drop once)
//                store the slot(s); head += n (release: pairs with the consumer's
//                acquire of head, which then sees the slots)
//     overwrite: per slot: release fence; store slot head % N; head += 1 (release)
//                The fence orders the store of head == k (made by the previous write)
//                before the stores into slot k, which clobber index k - N: a consumer
//                that read any word of the new slot k sees head >= k after its own
//                acquire fence, and so knows that index k - N is suspect.
//                No `lost` markers: a slot is always one event (a dropped one is only
//                counted, lost++), so that an overwritten slot is one lost event.
//     busy = 0
//
//   consumer (the CLI, one at a time):
//     h1 = head (acquire)
//     discard:   copy [tail, h1)                     the producer never writes there
//     overwrite: copy [max(tail, h1 - N + 1), h1)    index h1 - N may be being written
//                acquire fence (pairs with the producer's release fence); h2 = head
//                keep only indices i > h2 - N: the rest may have been overwritten
//                during the copy; everything skipped since tail is counted lost and
//                marked in front of what is kept, with the producer's drops since the
//                last drain
//     tail = h1 (release)
//
// Slots are written and read as four relaxed 64-bit atomics (std::atomic_ref), so the
// overwrite race is a detected race on atomics, never undefined behaviour, and costs
// plain moves on x86-64.
//
// Buffers: a bump allocator hands out fresh buffers; a ring closed by its thread is
// drained to the end by the consumer, reset and marked `recycled`, and claim() takes
// recycled rings when no fresh one is left.
#include "trace/shm_buffers.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <new>

namespace utramp::trace {

namespace {

constexpr char kMagic[8] = {'U', 'T', 'R', 'S', 'H', 'M', '0', '1'};
constexpr size_t kPage = 4096;

enum : uint32_t { kFresh = 0, kClaiming = 1, kActive = 2, kClosed = 3, kRecycled = 4 };

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t mode;
  uint32_t max_buffers;
  uint32_t events_per_buffer;
  uint64_t header_size;
  uint64_t buffer_stride;  // control page + ring, bytes
  uint64_t file_size;
  alignas(64) std::atomic<uint32_t> next;       // buffers [0, next) were handed out
  alignas(64) std::atomic<uint64_t> unclaimed;  // claim() calls that found no buffer
};
static_assert(sizeof(Header) <= kPage);

}  // namespace


namespace {

Header* header_of(void* base) { return static_cast<Header*>(base); }

Control* control_of(void* base, uint32_t i) {
  Header* h = header_of(base);
  return reinterpret_cast<Control*>(static_cast<char*>(base) + h->header_size +
                                    static_cast<size_t>(i) * h->buffer_stride);
}

Event* ring_of(Control* c) { return reinterpret_cast<Event*>(reinterpret_cast<char*>(c) + kPage); }

inline void load_slot(const Event* slot, Event* out) noexcept {
  uint64_t w[4];
  auto* p = const_cast<uint64_t*>(reinterpret_cast<const uint64_t*>(slot));
  for (int i = 0; i < 4; ++i)
    w[i] = std::atomic_ref<uint64_t>(p[i]).load(std::memory_order_relaxed);
  std::memcpy(out, w, sizeof w);
}

bool overflows_size(const ShmConfig& cfg, uint64_t* size, uint64_t* stride) {
  const uint64_t ring = static_cast<uint64_t>(cfg.events_per_buffer) * sizeof(Event);
  *stride = kPage + ring;
  if (cfg.max_buffers > (1ull << 40) / *stride) return true;
  *size = kPage + *stride * cfg.max_buffers;
  return false;
}

}  // namespace

// ---------------------------------------------------------------------------------
// Producer

Producer::Layout Producer::layout() noexcept {
  // The tracer's images load these as qwords (ftrace/graph_fast.cpp: inline_layout).
  static_assert(sizeof(ctl_) == 8 && sizeof(ring_) == 8 && sizeof(mask_) == 8 &&
                sizeof(tail_seen_) == 8);
  return Layout{static_cast<int32_t>(offsetof(Producer, ctl_)),
                static_cast<int32_t>(offsetof(Producer, ring_)),
                static_cast<int32_t>(offsetof(Producer, mask_)),
                static_cast<int32_t>(offsetof(Producer, tail_seen_)),
                static_cast<int32_t>(offsetof(Control, head)),
                static_cast<int32_t>(offsetof(Control, busy)),
                static_cast<int32_t>(offsetof(Control, pending)),
                static_cast<int32_t>(offsetof(Control, staged))};
}

uint64_t Producer::lost() const noexcept {
  return ctl_ ? ctl_->lost.load(std::memory_order_relaxed) : 0;
}

void Producer::close() noexcept {
  if (ctl_ == nullptr) return;
  if (ctl_->busy.load(std::memory_order_relaxed) == 0) publish_staged(ctl_);
  // Release: the consumer that sees `closed` sees every event published before.
  ctl_->state.store(kClosed, std::memory_order_release);
  ctl_ = nullptr;
  ring_ = nullptr;
}

bool Producer::staged_event(Event* out) const noexcept {
  if (ctl_ == nullptr || ctl_->staged.load(std::memory_order_relaxed) == 0) return false;
  load_slot(&ring_[ctl_->head.load(std::memory_order_relaxed) & mask_], out);
  return true;
}

bool Producer::last_published(Event* out) const noexcept {
  if (ctl_ == nullptr) return false;
  const uint64_t h = ctl_->head.load(std::memory_order_relaxed);
  if (h == 0) return false;
  // The producer writes at head and beyond only: slot h - 1 still holds that event.
  load_slot(&ring_[(h - 1) & mask_], out);
  return true;
}

void Producer::release_abandoned(bool keep_staged) noexcept {
  if (ctl_ == nullptr) return;
  if (ctl_->staged.load(std::memory_order_relaxed) != 0) {
    if (keep_staged) {
      // It may be half turned into a leaf: an entry again (data 0, type entry).
      auto* w = reinterpret_cast<uint64_t*>(&ring_[ctl_->head.load(std::memory_order_relaxed) & mask_]);
      uint64_t w3 = std::atomic_ref<uint64_t>(w[3]).load(std::memory_order_relaxed);
      w3 = (w3 & ~(uint64_t{0xff} << 16)) | (uint64_t{static_cast<uint8_t>(EventType::entry)} << 16);
      std::atomic_ref<uint64_t>(w[2]).store(0, std::memory_order_relaxed);
      std::atomic_ref<uint64_t>(w[3]).store(w3, std::memory_order_relaxed);
    } else {
      ctl_->staged.store(0, std::memory_order_relaxed);
    }
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  ctl_->busy.store(0, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------
// ShmBuffers

Result<ShmBuffers> ShmBuffers::create(const std::string& path, const ShmConfig& cfg) {
  if (cfg.events_per_buffer < 4 || (cfg.events_per_buffer & (cfg.events_per_buffer - 1)) != 0)
    return make_error(Errc::invalid_argument,
                      "events per buffer must be a power of two >= 4, not " +
                          std::to_string(cfg.events_per_buffer));
  if (cfg.max_buffers == 0) return make_error(Errc::invalid_argument, "max_buffers must be > 0");
  if (cfg.mode != BufferMode::discard && cfg.mode != BufferMode::overwrite)
    return make_error(Errc::invalid_argument, "unknown buffer mode");
  uint64_t size = 0, stride = 0;
  if (overflows_size(cfg, &size, &stride))
    return make_error(Errc::too_big, "ring buffers of " + std::to_string(cfg.max_buffers) + " x " +
                                         std::to_string(cfg.events_per_buffer) +
                                         " events exceed 1 TiB");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return make_error(Errc::io, path + ": " + std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    ::close(fd);
    return make_error(Errc::io, path + ": cannot size to " + std::to_string(size) +
                                    " bytes: " + std::strerror(err));
  }
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (base == MAP_FAILED)
    return make_error(Errc::no_memory, path + ": mmap: " + std::strerror(err));

  // The file is fresh (zero-filled); only the header needs values. The magic goes last
  // so that an agent attaching concurrently never sees a half-initialised header.
  auto* h = new (base) Header{};
  h->version = kShmVersion;
  h->mode = static_cast<uint32_t>(cfg.mode);
  h->max_buffers = cfg.max_buffers;
  h->events_per_buffer = cfg.events_per_buffer;
  h->header_size = kPage;
  h->buffer_stride = stride;
  h->file_size = size;
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(h->magic, kMagic, sizeof kMagic);

  ShmBuffers b;
  b.base_ = base;
  b.size_ = size;
  return b;
}

Result<ShmBuffers> ShmBuffers::attach(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return make_error(Errc::io, path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < kPage) {
    ::close(fd);
    return make_error(Errc::bad_format, path + ": too small for a ring buffer file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (base == MAP_FAILED)
    return make_error(Errc::no_memory, path + ": mmap: " + std::strerror(err));
  ShmBuffers b;
  b.base_ = base;
  b.size_ = size;
  const Header* h = header_of(base);
  std::string why;
  if (std::memcmp(h->magic, kMagic, sizeof kMagic) != 0)
    why = "not a utramp ring buffer file (bad magic)";
  else if (h->version != kShmVersion)
    why = "ring buffer version " + std::to_string(h->version) + ", expected " +
          std::to_string(kShmVersion);
  else {
    ShmConfig cfg{h->max_buffers, h->events_per_buffer, static_cast<BufferMode>(h->mode)};
    uint64_t want = 0, stride = 0;
    if (cfg.events_per_buffer < 4 || (cfg.events_per_buffer & (cfg.events_per_buffer - 1)) ||
        cfg.max_buffers == 0 || h->mode > 1 || overflows_size(cfg, &want, &stride) ||
        h->header_size != kPage || h->buffer_stride != stride || h->file_size != want ||
        want != size)
      why = "inconsistent header (sizes do not match the file)";
  }
  if (!why.empty()) return make_error(Errc::bad_format, path + ": " + why);
  return b;
}

ShmBuffers::ShmBuffers(ShmBuffers&& o) noexcept
    : base_(o.base_), size_(o.size_), scratch_(std::move(o.scratch_)), nested_lost_(o.nested_lost_) {
  o.base_ = nullptr;
  o.size_ = 0;
}

ShmBuffers& ShmBuffers::operator=(ShmBuffers&& o) noexcept {
  if (this != &o) {
    if (base_) ::munmap(base_, size_);
    base_ = o.base_;
    size_ = o.size_;
    scratch_ = std::move(o.scratch_);
    nested_lost_ = o.nested_lost_;
    o.base_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

ShmBuffers::~ShmBuffers() {
  if (base_) ::munmap(base_, size_);
}

Producer ShmBuffers::claim(uint32_t pid, uint32_t tid) noexcept {
  Producer p;
  if (base_ == nullptr) return p;
  Header* h = header_of(base_);
  Control* c = nullptr;
  uint32_t i = h->next.load(std::memory_order_relaxed);
  while (i < h->max_buffers &&
         !h->next.compare_exchange_weak(i, i + 1, std::memory_order_relaxed)) {
  }
  if (i < h->max_buffers) {
    c = control_of(base_, i);
    c->state.store(kClaiming, std::memory_order_relaxed);
  } else {
    // No fresh buffer left: take one the consumer recycled.
    for (uint32_t j = 0; j < h->max_buffers && c == nullptr; ++j) {
      Control* cand = control_of(base_, j);
      uint32_t want = kRecycled;
      if (cand->state.load(std::memory_order_relaxed) == kRecycled &&
          cand->state.compare_exchange_strong(want, kClaiming, std::memory_order_acquire))
        c = cand;  // acquire: pairs with the consumer's release after resetting it
    }
  }
  if (c == nullptr) {
    h->unclaimed.fetch_add(1, std::memory_order_relaxed);
    return p;
  }
  c->pid.store(pid, std::memory_order_relaxed);
  c->tid.store(tid, std::memory_order_relaxed);
  // Release: the consumer that sees `active` sees the owner and the zeroed counters.
  c->state.store(kActive, std::memory_order_release);
  p.ctl_ = c;
  p.ring_ = ring_of(c);
  p.mask_ = h->events_per_buffer - 1;
  p.mode_ = h->mode;
  return p;
}

std::vector<uint32_t> ShmBuffers::producer_pids() const {
  std::vector<uint32_t> pids;
  if (base_ == nullptr) return pids;
  Header* hdr = header_of(base_);
  const uint32_t used = std::min(hdr->next.load(std::memory_order_acquire), hdr->max_buffers);
  for (uint32_t i = 0; i < used; ++i) {
    Control* c = control_of(base_, i);
    const uint32_t st = c->state.load(std::memory_order_acquire);
    if (st != kActive && st != kClaiming) continue;
    const uint32_t pid = c->pid.load(std::memory_order_relaxed);
    if (pid && std::find(pids.begin(), pids.end(), pid) == pids.end()) pids.push_back(pid);
  }
  return pids;
}

namespace {

// A slot staged by a producer that is gone: published only if it is a whole entry (or a
// leaf) — a thread can end while the write was cut short by a signal handler's longjmp.
bool staged_is_whole(const Event& slot, uint64_t last_time) {
  Event e;
  load_slot(&slot, &e);
  if (e.addr == 0 || e.time < last_time) return false;
  if (e.type == static_cast<uint8_t>(EventType::entry)) return true;
  return e.type == static_cast<uint8_t>(EventType::leaf) && e.data >= e.time;
}

}  // namespace

size_t ShmBuffers::drain(
    const std::function<void(uint32_t, uint32_t, std::span<const Event>, uint64_t)>& fn,
    bool final) {
  if (base_ == nullptr) return 0;
  Header* hdr = header_of(base_);
  const uint64_t n = hdr->events_per_buffer;
  const bool overwrite = hdr->mode == static_cast<uint32_t>(BufferMode::overwrite);
  // Slot 0 is kept for a `lost` marker in front, the last one for one behind.
  if (scratch_.size() < n + 2) scratch_.resize(n + 2);
  const uint32_t used = std::min(hdr->next.load(std::memory_order_acquire), hdr->max_buffers);
  size_t delivered = 0;

  for (uint32_t i = 0; i < used; ++i) {
    Control* c = control_of(base_, i);
    const uint32_t st = c->state.load(std::memory_order_acquire);  // pairs with claim()/close()
    if (st != kActive && st != kClosed) continue;
    const uint32_t pid = c->pid.load(std::memory_order_relaxed);
    const uint32_t tid = c->tid.load(std::memory_order_relaxed);
    const Event* ring = ring_of(c);
    uint64_t tail = c->tail.load(std::memory_order_relaxed);
    uint64_t h1 = c->head.load(std::memory_order_acquire);  // pairs with write()'s release
    if (final && c->staged.exchange(0, std::memory_order_relaxed) != 0 &&
        staged_is_whole(ring[h1 & (n - 1)], c->last_time)) {
      // The producer is gone with an entry staged (its thread was inside a call with
      // no event since): that entry is recorded too.
      c->head.store(++h1, std::memory_order_relaxed);
    }
    uint64_t lost = 0;
    if (h1 < tail) h1 = tail;  // a scribbled head: never go back
    // Events the producer dropped since the last drain (a full ring, a nested write):
    // discard mode has marked them in the ring, overwrite mode has not (see below).
    const uint64_t produced_lost = c->lost.load(std::memory_order_relaxed);
    const uint64_t dropped = produced_lost - c->lost_reported;
    c->lost_reported = produced_lost;
    const uint64_t nested = c->nested.load(std::memory_order_relaxed);
    nested_lost_ += nested - c->nested_reported;
    c->nested_reported = nested;
    lost += dropped;
    // What is handed to fn: up to two runs of events (a wrapped ring read in place, or
    // the scratch copy) and a `lost` marker at the end.
    std::span<const Event> runs[2];
    Event tail_marker{};
    bool has_tail_marker = false;
    if (!overwrite) {
      if (h1 - tail > n) {  // impossible unless the target scribbled on the control page
        lost += h1 - tail - n;
        tail = h1 - n;
      }
      // In place: the producer never writes [tail, h1) before tail moves past it, which
      // happens below, after fn has consumed them (no copy of what may be most of the
      // recording's bytes).
      const uint64_t first = tail & (n - 1), len = h1 - tail;
      const uint64_t run1 = std::min(len, n - first);
      runs[0] = std::span<const Event>(ring + first, run1);
      runs[1] = std::span<const Event>(ring, len - run1);
      // The producer's markers carry running totals: counts since the previous marker
      // here, in place (the producer does not write [tail, h1) until tail moves). One
      // that counts nothing new (published twice) is left out, from a copy.
      bool empty_marker = false;
      for (const auto& run : runs)
        for (const Event& e : run)
          if (e.type == static_cast<uint8_t>(EventType::lost)) {
            Event& m = const_cast<Event&>(e);
            const uint64_t total = m.data;
            m.data = total > c->marked_seen ? total - c->marked_seen : 0;
            if (total > c->marked_seen) c->marked_seen = total;
            empty_marker |= m.data == 0;
          }
      if (empty_marker) {
        size_t count = 0;
        for (const auto& run : runs)
          for (const Event& e : run)
            if (e.type != static_cast<uint8_t>(EventType::lost) || e.data != 0) scratch_[count++] = e;
        runs[0] = std::span<const Event>(scratch_.data(), count);
        runs[1] = {};
      }
    } else {
      Event* out = scratch_.data() + 1;
      size_t count = 0;
      const uint64_t start = std::max(tail, h1 >= n ? h1 - n + 1 : 0);
      for (uint64_t k = start; k < h1; ++k) load_slot(&ring[k & (n - 1)], &out[count++]);
      std::atomic_thread_fence(std::memory_order_acquire);  // pairs with write()'s release fence
      const uint64_t h2 = c->head.load(std::memory_order_relaxed);
      const uint64_t valid = std::min(h1, std::max(start, h2 >= n ? h2 - n + 1 : 0));
      out += valid - start;
      count -= valid - start;
      lost += valid - tail;
      // One marker for what was overwritten and what the producer dropped: it writes no
      // markers in this mode (a marker's slot could be overwritten and then count as
      // one event). Where a drop happened is known only to be since the last drain.
      if (const uint64_t unmarked = valid - tail + dropped) {
        // The marker takes the time of the first delivered event that has one (arg and
        // string events carry values, not times).
        const Event* first = nullptr;
        for (size_t k = 0; k < count && !first; ++k)
          if (out[k].type != static_cast<uint8_t>(EventType::arg) &&
              out[k].type != static_cast<uint8_t>(EventType::string))
            first = &out[k];
        const Event marker =
            lost_event(unmarked, first ? first->time : c->last_time, first ? first->depth : 0);
        *--out = marker;
        ++count;
      }
      runs[0] = std::span<const Event>(out, count);
    }
    for (int r = 1; r >= 0; --r) {
      bool found = false;
      for (size_t k = runs[r].size(); k-- > 0;)
        if (runs[r][k].type != static_cast<uint8_t>(EventType::arg) &&
            runs[r][k].type != static_cast<uint8_t>(EventType::string)) {
          // A leaf ends at its exit's time (data): a `lost` marker put behind it at the
          // end must not go back before it.
          const Event& e = runs[r][k];
          c->last_time = e.type == static_cast<uint8_t>(EventType::leaf) ? e.data : e.time;
          found = true;
          break;
        }
      if (found) break;
    }
    if (final || st == kClosed) {
      // The producer is gone: drops it never got to mark are marked at the end.
      c->pending.store(0, std::memory_order_relaxed);
      const uint64_t p = overwrite || produced_lost < c->marked_seen ? 0 : produced_lost - c->marked_seen;
      c->marked_seen = produced_lost;
      if (p) {
        tail_marker = lost_event(p, c->last_time, 0);
        has_tail_marker = true;
      }
    }
    size_t count = 0;
    for (const auto& run : runs) {
      count += run.size();
      for (const Event& e : run)
        delivered += e.type == static_cast<uint8_t>(EventType::leaf)   ? 2
                     : e.type != static_cast<uint8_t>(EventType::lost) ? 1
                                                                       : 0;
    }
    if (count || lost) {
      fn(pid, tid, runs[0], lost);
      if (!runs[1].empty()) fn(pid, tid, runs[1], 0);
    }
    if (has_tail_marker) fn(pid, tid, std::span<const Event>(&tail_marker, 1), 0);
    c->tail.store(h1, std::memory_order_release);  // pairs with write()'s acquire of tail

    if (st == kClosed) {
      c->head.store(0, std::memory_order_relaxed);
      c->lost.store(0, std::memory_order_relaxed);
      c->pending.store(0, std::memory_order_relaxed);
      c->busy.store(0, std::memory_order_relaxed);
      c->staged.store(0, std::memory_order_relaxed);
      c->tail.store(0, std::memory_order_relaxed);
      c->lost_reported = 0;
      c->last_time = 0;
      c->marked_seen = 0;
      c->nested.store(0, std::memory_order_relaxed);
      c->nested_reported = 0;
      c->state.store(kRecycled, std::memory_order_release);  // pairs with claim()'s acquire
    }
  }
  return delivered;
}

uint64_t ShmBuffers::unclaimed() const noexcept {
  return base_ ? header_of(base_)->unclaimed.load(std::memory_order_relaxed) : 0;
}

BufferMode ShmBuffers::mode() const noexcept {
  return base_ ? static_cast<BufferMode>(header_of(base_)->mode) : BufferMode::discard;
}

ShmConfig ShmBuffers::config() const noexcept {
  if (base_ == nullptr) return {};
  const Header* h = header_of(base_);
  return ShmConfig{h->max_buffers, h->events_per_buffer, static_cast<BufferMode>(h->mode)};
}

}  // namespace utramp::trace
