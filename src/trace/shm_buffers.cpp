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
//     block:     as discard, but with no room the producer waits (wait_for_room) until a
//                drain pass of the consumer made some, checking the consumer's count
//                of passes over the ring; after kBlockWaitNs without one it drops the
//                event (lost++, timed_out++, pending++) and notes that pass in
//                gave_up: until the consumer makes another, a full ring drops at once
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
//     tail = h1 (release); passes += 1 (release: a producer waiting in block mode
//                sees the tail of this pass when it sees the pass)
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
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>
#include <utility>

#include "arch/cpu.hpp"

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

Header* header_of(void* base) { return static_cast<Header*>(base); }

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

namespace {

uint64_t raw_monotonic_ns() noexcept {
  timespec ts{};
  arch::raw_syscall6(SYS_clock_gettime, CLOCK_MONOTONIC, reinterpret_cast<long>(&ts));
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

bool wait_for_room(Control* c, uint64_t h, uint64_t need, uint64_t size, uint64_t& tail_seen) noexcept {
  uint64_t passes = c->passes.load(std::memory_order_acquire);
  // Gave up at this very pass: the consumer has not come back since.
  if (c->gave_up.load(std::memory_order_relaxed) == passes + 1) return false;
  uint64_t since = raw_monotonic_ns();
  for (unsigned round = 0;; ++round) {
    tail_seen = c->tail.load(std::memory_order_acquire);  // pairs with drain()'s release
    if (h - tail_seen + need <= size) return true;
    // A pass makes room (it takes everything published): one is under way or due.
    const uint64_t p = c->passes.load(std::memory_order_acquire);
    const uint64_t now = raw_monotonic_ns();
    if (p != passes) {
      passes = p;
      since = now;
    } else if (now - since >= kBlockWaitNs) {
      c->gave_up.store(passes + 1, std::memory_order_relaxed);
      return false;
    }
    // A few yields first (the consumer may be waiting for this core), then short sleeps:
    // the consumer drains every millisecond.
    if (round < 8) {
      arch::raw_syscall6(SYS_sched_yield);
    } else {
      const timespec nap{0, 50'000};
      arch::raw_syscall6(SYS_nanosleep, reinterpret_cast<long>(&nap), 0);
    }
  }
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

namespace {

// The highest pid or tid Linux hands out (PID_MAX_LIMIT on 64-bit): an owner beyond it
// was not written by claim().
constexpr uint32_t kMaxPid = 4u << 20;

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%#" PRIx64, v);
  return buf;
}

}  // namespace

Result<ShmBuffers> ShmBuffers::map_new(int fd, const std::string& name, const ShmConfig& cfg) {
  uint64_t size = 0, stride = 0;
  (void)overflows_size(cfg, &size, &stride);  // checked by the callers
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0)
    return make_error(Errc::io, name + ": cannot size to " + std::to_string(size) +
                                    " bytes: " + std::strerror(errno));
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED)
    return make_error(Errc::no_memory, name + ": mmap: " + std::strerror(errno));

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
  b.cfg_ = cfg;
  b.stride_ = stride;
  return b;
}

namespace {

Result<void> check_config(const ShmConfig& cfg) {
  if (cfg.events_per_buffer < 4 || (cfg.events_per_buffer & (cfg.events_per_buffer - 1)) != 0)
    return make_error(Errc::invalid_argument,
                      "events per buffer must be a power of two >= 4, not " +
                          std::to_string(cfg.events_per_buffer));
  if (cfg.max_buffers == 0) return make_error(Errc::invalid_argument, "max_buffers must be > 0");
  if (cfg.mode != BufferMode::discard && cfg.mode != BufferMode::overwrite &&
      cfg.mode != BufferMode::block)
    return make_error(Errc::invalid_argument, "unknown buffer mode");
  uint64_t size = 0, stride = 0;
  if (overflows_size(cfg, &size, &stride))
    return make_error(Errc::too_big, "ring buffers of " + std::to_string(cfg.max_buffers) + " x " +
                                         std::to_string(cfg.events_per_buffer) +
                                         " events exceed 1 TiB");
  return {};
}

}  // namespace

Result<ShmBuffers> ShmBuffers::create(const std::string& path, const ShmConfig& cfg) {
  UTRAMP_TRY(check_config(cfg));
  // A new file, never one that exists nor a symbolic link planted at `path`.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return make_error(Errc::io, path + ": " + std::strerror(errno));
  auto b = map_new(fd, path, cfg);
  ::close(fd);
  if (!b) {
    ::unlink(path.c_str());
    return b;
  }
  b->agent_path_ = path;
  return b;
}

Result<ShmBuffers> ShmBuffers::create_anonymous(const ShmConfig& cfg) {
  UTRAMP_TRY(check_config(cfg));
  const int fd = ::memfd_create("utramp-buffers", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return make_error(Errc::io, std::string("memfd_create: ") + std::strerror(errno));
  auto b = map_new(fd, "ring buffers (memfd)", cfg);
  // Sized once and for all: no process that opens it can shrink it under a mapping
  // (an access beyond the end is SIGBUS) nor grow it.
  if (b && ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    b = make_error(Errc::io, std::string("ring buffers (memfd): cannot seal: ") + std::strerror(errno));
  if (!b) {
    ::close(fd);
    return b;
  }
  b->fd_ = fd;
  b->agent_path_ = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd);
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
  ShmConfig cfg{h->max_buffers, h->events_per_buffer, static_cast<BufferMode>(h->mode)};
  uint64_t want = 0, stride = 0;
  if (std::memcmp(h->magic, kMagic, sizeof kMagic) != 0)
    why = "not a utramp ring buffer file (bad magic)";
  else if (h->version != kShmVersion)
    why = "ring buffer version " + std::to_string(h->version) + ", expected " +
          std::to_string(kShmVersion);
  else if (cfg.events_per_buffer < 4 || (cfg.events_per_buffer & (cfg.events_per_buffer - 1)) ||
           cfg.max_buffers == 0 || h->mode > 2 || overflows_size(cfg, &want, &stride) ||
           h->header_size != kPage || h->buffer_stride != stride || h->file_size != want ||
           want != size)
    why = "inconsistent header (sizes do not match the file)";
  if (!why.empty()) return make_error(Errc::bad_format, path + ": " + why);
  // From here on the layout is this copy, checked against the file's size: the header
  // may be overwritten later, the mapping's bounds never move.
  b.cfg_ = cfg;
  b.stride_ = stride;
  return b;
}

ShmBuffers::ShmBuffers(ShmBuffers&& o) noexcept { *this = std::move(o); }

ShmBuffers& ShmBuffers::operator=(ShmBuffers&& o) noexcept {
  if (this != &o) {
    if (base_ && !retired_) ::munmap(base_, size_);
    if (fd_ >= 0) ::close(fd_);
    retired_ = std::exchange(o.retired_, false);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    fd_ = std::exchange(o.fd_, -1);
    agent_path_ = std::move(o.agent_path_);
    cfg_ = o.cfg_;
    stride_ = o.stride_;
    scratch_ = std::move(o.scratch_);
    rings_ = std::move(o.rings_);
    used_ = o.used_;
    unclaimed_seen_ = o.unclaimed_seen_;
    nested_lost_ = o.nested_lost_;
    timed_out_lost_ = o.timed_out_lost_;
    largest_backlog_ = o.largest_backlog_;
    overwrites_ = std::move(o.overwrites_);
    header_overwritten_ = std::move(o.header_overwritten_);
  }
  return *this;
}

void ShmBuffers::retire() noexcept {
  if (base_) {
    void* p = ::mmap(base_, size_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return;  // still the rings: left mapped as they are
    retired_ = true;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

ShmBuffers::~ShmBuffers() {
  if (base_ && !retired_) ::munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
}

Control* ShmBuffers::control(uint32_t i) const noexcept {
  return reinterpret_cast<Control*>(static_cast<char*>(base_) + kPage + static_cast<size_t>(i) * stride_);
}

Producer ShmBuffers::claim(uint32_t pid, uint32_t tid) noexcept {
  Producer p;
  if (base_ == nullptr) return p;
  Header* h = header_of(base_);
  const uint32_t max = cfg_.max_buffers;
  Control* c = nullptr;
  uint32_t i = h->next.load(std::memory_order_relaxed);
  while (i < max && !h->next.compare_exchange_weak(i, i + 1, std::memory_order_relaxed)) {
  }
  if (i < max) {
    c = control(i);
    c->state.store(kClaiming, std::memory_order_relaxed);
  } else {
    // No fresh buffer left: take one the consumer recycled.
    for (uint32_t j = 0; j < max && c == nullptr; ++j) {
      Control* cand = control(j);
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
  p.mask_ = cfg_.events_per_buffer - 1;
  p.mode_ = static_cast<uint32_t>(cfg_.mode);
  return p;
}

std::vector<uint32_t> ShmBuffers::producer_pids() const {
  std::vector<uint32_t> pids;
  for (const Ring& r : rings_)
    if (r.active && std::find(pids.begin(), pids.end(), r.pid) == pids.end()) pids.push_back(r.pid);
  return pids;
}

void ShmBuffers::overwrite(Ring& r, std::string what) {
  if (r.reported) return;
  r.reported = true;
  overwrites_.push_back({r.pid, r.tid, r.last_time, std::move(what)});
}

// The header as the CLI wrote it: what it holds now is only reported (the layout in use
// is cfg_), and `unclaimed` is believed only while the header is intact and it grows.
void ShmBuffers::check_header() {
  if (!header_overwritten_.empty()) return;
  const Header* h = header_of(base_);
  uint64_t want = 0, stride = 0;
  (void)overflows_size(cfg_, &want, &stride);
  const uint64_t unclaimed = h->unclaimed.load(std::memory_order_relaxed);
  if (std::memcmp(h->magic, kMagic, sizeof kMagic) == 0 && h->version == kShmVersion &&
      h->mode == static_cast<uint32_t>(cfg_.mode) && h->max_buffers == cfg_.max_buffers &&
      h->events_per_buffer == cfg_.events_per_buffer && h->header_size == kPage &&
      h->buffer_stride == stride && h->file_size == want && unclaimed >= unclaimed_seen_) {
    unclaimed_seen_ = unclaimed;
    return;
  }
  char magic[17];
  for (int i = 0; i < 8; ++i)
    std::snprintf(magic + 2 * i, 3, "%02x", static_cast<unsigned char>(h->magic[i]));
  header_overwritten_ = "magic " + std::string(magic) + ", " + std::to_string(h->max_buffers) + " x " +
                        std::to_string(h->events_per_buffer) + " events, " +
                        std::to_string(unclaimed) + " threads unclaimed; written as " +
                        std::to_string(cfg_.max_buffers) + " x " +
                        std::to_string(cfg_.events_per_buffer) + ", " + std::to_string(unclaimed_seen_);
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
    bool final_all, std::span<const uint32_t> running) {
  if (base_ == nullptr) return 0;
  check_header();
  Header* hdr = header_of(base_);
  const uint64_t n = cfg_.events_per_buffer;
  const bool overwrite_mode = cfg_.mode == BufferMode::overwrite;
  // The scratch copy grows to what a pass copies, when it copies (see below): a ring's
  // worth up front (8 MiB at record's default) cost the recorder's first pass
  // milliseconds of page faults, a recording that does nothing included.
  if (rings_.size() < cfg_.max_buffers) rings_.resize(cfg_.max_buffers);
  // `next` only grows: a smaller value is not the allocator's, the highest seen stands.
  used_ = std::max(used_, std::min(hdr->next.load(std::memory_order_acquire), cfg_.max_buffers));
  const uint64_t now = monotonic_ns();
  size_t delivered = 0;
  largest_backlog_ = 0;

  for (uint32_t i = 0; i < used_; ++i) {
    Control* c = control(i);
    Ring& r = rings_[i];
    const uint32_t st = c->state.load(std::memory_order_acquire);  // pairs with claim()/close()
    if (!r.active) {
      if (st > kRecycled && !r.reported) {  // no state the protocol has: not its owner's either
        overwrites_.push_back({0, 0, 0, "ring " + std::to_string(i) + ": state " + std::to_string(st) +
                                            " before its owner was known; not read"});
        r.reported = true;
      }
      if (st != kActive && st != kClosed) continue;
      // Claimed since the last look: its owner, once (claim() wrote it before `active`).
      const uint32_t pid = c->pid.load(std::memory_order_relaxed);
      const uint32_t tid = c->tid.load(std::memory_order_relaxed);
      if (pid == 0 || pid > kMaxPid || tid == 0 || tid > kMaxPid) {
        if (!r.reported)
          overwrites_.push_back({0, 0, 0, "ring " + std::to_string(i) + ": owner pid " +
                                              std::to_string(pid) + ", tid " + std::to_string(tid) +
                                              " (no such thread); not read"});
        r.reported = true;
        continue;
      }
      r = Ring{};
      r.active = true;
      r.pid = pid;
      r.tid = tid;
      r.seen_ns = now;
      // tail: 0 in a fresh file and after a recycle (the consumer reset the ring).
    } else if (st != kActive && st != kClosed) {
      overwrite(r, "state " + std::to_string(st) + " (neither active nor closed)");
    }
    const bool closed = st == kClosed;
    const bool final = final_all && std::find(running.begin(), running.end(), r.pid) == running.end();
    const Event* ring = ring_of(c);
    uint64_t h1 = c->head.load(std::memory_order_acquire);  // pairs with write()'s release
    // A position the protocol cannot produce: the producer only moves head forward, and
    // in discard mode never more than a ring ahead of the tail it was given.
    const bool head_bad = h1 < r.tail || (!overwrite_mode && h1 - r.tail > n);
    // Counters only grow, and a producer cannot drop more than one event a nanosecond.
    const uint64_t bound = now - r.seen_ns + 1'000'000'000ull;
    const uint64_t produced_lost = c->lost.load(std::memory_order_relaxed);
    const uint64_t nested = c->nested.load(std::memory_order_relaxed);
    const uint64_t timed_out = c->timed_out.load(std::memory_order_relaxed);
    const bool lost_bad = produced_lost < r.lost_reported || produced_lost > bound;
    const bool nested_bad = nested < r.nested_reported || nested > bound;
    // (Not evidence of an overwrite alone: only what is counted.)
    const bool timed_out_ok = timed_out >= r.timed_out_reported && timed_out <= bound;
    if (head_bad || lost_bad || nested_bad) {
      overwrite(r, head_bad ? "head " + hex64(h1) + " with the consumer at " + std::to_string(r.tail) +
                                  " in a ring of " + std::to_string(n) + " events"
                   : lost_bad ? "lost count " + hex64(produced_lost) + " after " + std::to_string(r.lost_reported)
                              : "nested count " + hex64(nested) + " after " + std::to_string(r.nested_reported));
      // Go on from where the producer is now: nothing in between can be trusted.
      r.tail = h1;
      r.lost_reported = r.marked_seen = produced_lost;
      r.nested_reported = nested;
      c->tail.store(h1, std::memory_order_release);
      if (closed) {
        c->staged.store(0, std::memory_order_relaxed);
      } else {
        continue;
      }
    }
    if (final && !head_bad && c->staged.exchange(0, std::memory_order_relaxed) != 0 &&
        (overwrite_mode || h1 - r.tail < n) && staged_is_whole(ring[h1 & (n - 1)], r.last_time)) {
      // The producer is gone with an entry staged (its thread was inside a call with
      // no event since): that entry is recorded too.
      c->head.store(++h1, std::memory_order_relaxed);
    }
    uint64_t tail = r.tail;
    uint64_t lost = 0;
    // Events the producer dropped since the last drain (a full ring, a nested write):
    // discard mode has marked them in the ring, overwrite mode has not (see below).
    const uint64_t dropped = lost_bad ? 0 : produced_lost - r.lost_reported;
    r.lost_reported = produced_lost;
    if (!nested_bad) nested_lost_ += nested - r.nested_reported;
    r.nested_reported = nested;
    if (timed_out_ok) timed_out_lost_ += timed_out - r.timed_out_reported;
    r.timed_out_reported = timed_out;
    lost += dropped;
    // What is handed to fn: up to two runs of events (a wrapped ring read in place, or
    // the scratch copy) and a `lost` marker at the end.
    std::span<const Event> runs[2];
    Event tail_marker{};
    bool has_tail_marker = false;
    if (!overwrite_mode) {
      // In place: the producer never writes [tail, h1) before tail moves past it, which
      // happens below, after fn has consumed them (no copy of what may be most of the
      // recording's bytes). A program that writes there anyway only spoils its own
      // events: nothing below trusts their contents beyond this ring.
      const uint64_t first = tail & (n - 1), len = h1 - tail;
      const uint64_t run1 = std::min(len, n - first);
      runs[0] = std::span<const Event>(ring + first, run1);
      runs[1] = std::span<const Event>(ring, len - run1);
      // The producer's markers carry running totals: counts since the previous marker
      // here, in place (the producer does not write [tail, h1) until tail moves). One
      // that counts nothing new (published twice) is left out, from a copy. A total
      // cannot exceed the producer's count of drops, read after head.
      bool empty_marker = false;
      for (const auto& run : runs)
        for (const Event& e : run)
          if (e.type == static_cast<uint8_t>(EventType::lost)) {
            auto data = std::atomic_ref<uint64_t>(const_cast<Event&>(e).data);
            uint64_t total = data.load(std::memory_order_relaxed);
            if (total > produced_lost) {
              overwrite(r, "a lost marker counts " + hex64(total) + " of the producer's " +
                               std::to_string(produced_lost) + " drops");
              total = r.marked_seen;
            }
            const uint64_t count = total > r.marked_seen ? total - r.marked_seen : 0;
            if (total > r.marked_seen) r.marked_seen = total;
            data.store(count, std::memory_order_relaxed);
            empty_marker |= count == 0;
          }
      if (empty_marker) {
        if (scratch_.size() < len) scratch_.resize(len);
        size_t count = 0;
        for (const auto& run : runs)
          for (const Event& e : run)
            if (e.type != static_cast<uint8_t>(EventType::lost) || e.data != 0) scratch_[count++] = e;
        runs[0] = std::span<const Event>(scratch_.data(), count);
        runs[1] = {};
      }
    } else {
      const uint64_t start = std::max(tail, h1 >= n ? h1 - n + 1 : 0);
      // Slot 0 is kept for a `lost` marker in front, the last one for one behind.
      if (scratch_.size() < h1 - start + 2) scratch_.resize(h1 - start + 2);
      Event* out = scratch_.data() + 1;
      size_t count = 0;
      for (uint64_t k = start; k < h1; ++k) load_slot(&ring[k & (n - 1)], &out[count++]);
      std::atomic_thread_fence(std::memory_order_acquire);  // pairs with write()'s release fence
      uint64_t h2 = c->head.load(std::memory_order_relaxed);
      if (h2 < h1) {
        overwrite(r, "head " + hex64(h2) + " went back from " + std::to_string(h1));
        h2 = h1;
      }
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
            lost_event(unmarked, first ? first->time : r.last_time, first ? first->depth : 0);
        *--out = marker;
        ++count;
      }
      runs[0] = std::span<const Event>(out, count);
    }
    for (int k = 1; k >= 0; --k) {
      bool found = false;
      for (size_t j = runs[k].size(); j-- > 0;)
        if (runs[k][j].type != static_cast<uint8_t>(EventType::arg) &&
            runs[k][j].type != static_cast<uint8_t>(EventType::string)) {
          // A leaf ends at its exit's time (data): a `lost` marker put behind it at the
          // end must not go back before it.
          const Event& e = runs[k][j];
          r.last_time = e.type == static_cast<uint8_t>(EventType::leaf) ? e.data : e.time;
          found = true;
          break;
        }
      if (found) break;
    }
    if (final || closed) {
      // The producer is gone: drops it never got to mark are marked at the end.
      c->pending.store(0, std::memory_order_relaxed);
      const uint64_t p =
          overwrite_mode || produced_lost < r.marked_seen ? 0 : produced_lost - r.marked_seen;
      r.marked_seen = produced_lost;
      if (p) {
        tail_marker = lost_event(p, r.last_time, 0);
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
      fn(r.pid, r.tid, runs[0], lost);
      if (!runs[1].empty()) fn(r.pid, r.tid, runs[1], 0);
    }
    if (has_tail_marker) fn(r.pid, r.tid, std::span<const Event>(&tail_marker, 1), 0);
    largest_backlog_ = std::max(largest_backlog_, h1 - r.tail);
    r.tail = h1;
    c->tail.store(h1, std::memory_order_release);  // pairs with write()'s acquire of tail
    // A producer waiting for room (block mode) sees this pass: pairs with wait_for_room().
    c->passes.store(++r.passes, std::memory_order_release);

    if (closed) {
      c->head.store(0, std::memory_order_relaxed);
      c->lost.store(0, std::memory_order_relaxed);
      c->pending.store(0, std::memory_order_relaxed);
      c->busy.store(0, std::memory_order_relaxed);
      c->staged.store(0, std::memory_order_relaxed);
      c->tail.store(0, std::memory_order_relaxed);
      c->nested.store(0, std::memory_order_relaxed);
      c->timed_out.store(0, std::memory_order_relaxed);
      c->gave_up.store(0, std::memory_order_relaxed);
      c->passes.store(0, std::memory_order_relaxed);
      r = Ring{};
      c->state.store(kRecycled, std::memory_order_release);  // pairs with claim()'s acquire
    }
  }
  return delivered;
}

uint64_t ShmBuffers::unclaimed() const noexcept {
  if (base_ == nullptr) return 0;
  if (!header_overwritten_.empty()) return unclaimed_seen_;
  return std::max(unclaimed_seen_, header_of(base_)->unclaimed.load(std::memory_order_relaxed));
}

}  // namespace utramp::trace
