#include "tramp/threads.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <mutex>

#include "arch/cpu.hpp"
#include "common/init.hpp"
#include "os/signal_stack.hpp"

namespace utramp::tramp {

namespace {

// This thread's block, null until the thread registers (the stub's test). Set once per
// thread (and kept by a forked child's thread, whose block is the copy of its parent's).
__thread ThreadBlock* t_block __attribute__((tls_model("initial-exec"))) = nullptr;

// The registry: one entry per thread that has entered a stub. A thread claims a free
// entry with a compare-and-swap, so registering takes no lock and allocates nothing
// from the heap: generated code registers a thread on its first entry into any stub,
// which may happen inside a signal handler, inside the allocator, or while this thread
// holds one of utramp's locks. In .bss: pages never used cost nothing.
//
// Each entry owns a block, mapped by the first thread that claims the entry and reused
// (zeroed) by the next ones; never unmapped, so that a scan holding an entry's block
// address never reads freed memory, and a process that starts and ends threads maps no
// more blocks than it ever had registered threads at once.
//
// Entries of threads that exited are released by one scan at a time (snapshot_counters,
// under g_release_mu); every other scan only reads. A second releaser would be unsound:
// a scan that read (block B, tid T) of a dead thread, then saw T gone, could clear the
// entry after another scan had released it and a new thread had claimed it again (and
// with it the block B); that thread, its pointer set, would never be seen again. With
// one releaser an entry it has read changes only by its own hand (claims take free
// entries only), and by its own thread's (below: a registration a signal handler beat).
inline constexpr size_t kMaxThreads = 1 << 15;
struct Entry {
  std::atomic<uint32_t> claimed{0};
  std::atomic<pid_t> tid{0};             // 0 while being claimed or released
  std::atomic<ThreadBlock*> block{nullptr};  // the entry's own: set once, never unmapped
};
Entry g_entries[kMaxThreads];
std::atomic<size_t> g_used{0};  // entries [0, g_used) may be in use

std::mutex g_release_mu;  // the one scan that may release entries (snapshot_counters)
std::mutex g_slot_mu;     // the slot bitmaps below (attach and reclamation only)
std::atomic<void (*)(const ThreadBlock*, int)> g_scan_hook{nullptr};
std::atomic<void (*)()> g_register_hook{nullptr};
// How many owners (trampolines, images) each counter slot has: 0 free. See
// alloc_counter_slot().
std::array<uint32_t, kCounterSlots> g_counter_owners{};
uint32_t g_next_shared = 0;  // where the search for the least-shared slot starts
uint32_t g_first_free = 0;   // no slot below it is free (a tracer takes thousands in a row)
std::array<bool, kProgSlots> g_prog_used{};
std::atomic<size_t> g_mapped{0};  // blocks mapped so far (mapped_blocks)
ThreadBlock g_zero_block;          // this_thread_block() when no block can be had

// From the kernel, not libc's syscall(): generated code registers a thread on its first
// entry into a stub, and libc's functions may be traced (`record --libs`).
pid_t gettid_raw() { return static_cast<pid_t>(arch::raw_syscall6(SYS_gettid)); }

void reset_after_fork() {
  // Only the forking thread exists in the child. It keeps its block (a copy of its
  // parent's, its counters included: it may be inside stubs) and the entry that owns
  // it; every other entry is free, its block (copied too) kept for reuse.
  const size_t n = g_used.load(std::memory_order_relaxed);
  const pid_t tid = gettid_raw();
  for (size_t i = 0; i < n; ++i) {
    Entry& e = g_entries[i];
    const bool mine = t_block && e.block.load(std::memory_order_relaxed) == t_block;
    e.tid.store(mine ? tid : 0, std::memory_order_relaxed);
    e.claimed.store(mine ? 1 : 0, std::memory_order_relaxed);
  }
  new (&g_slot_mu) std::mutex();
  new (&g_release_mu) std::mutex();
}

__attribute__((constructor(UTRAMP_INIT_RUNTIME))) void init_threads() {
  pthread_atfork(nullptr, nullptr, reset_after_fork);
}

template <size_t N>
Result<uint32_t> alloc_in(std::array<bool, N>& used, const char* what) {
  std::lock_guard lock(g_slot_mu);
  for (uint32_t i = 0; i < N; ++i)
    if (!used[i]) {
      used[i] = true;
      return i;
    }
  return make_error(Errc::busy, fmt::format("all {} {} slots are in use", N, what));
}

template <size_t N>
void free_in(std::array<bool, N>& used, uint32_t slot) {
  std::lock_guard lock(g_slot_mu);
  if (slot < N) used[slot] = false;
}

}  // namespace

__thread bool t_utramp_thread = false;

TlsLayout tls_layout() {
  const auto base = static_cast<int64_t>(arch::thread_pointer());
  return TlsLayout{reinterpret_cast<int64_t>(&t_block) - base,
                   static_cast<int32_t>(offsetof(ThreadBlock, counters)),
                   static_cast<int32_t>(offsetof(ThreadBlock, active))};
}

ThreadBlock& this_thread_block() {
  if (!t_block) utramp_register_thread();
  return t_block ? *t_block : g_zero_block;
}

size_t mapped_blocks() { return g_mapped.load(std::memory_order_relaxed); }

// Async-signal-safe: a compare-and-swap per entry looked at, gettid, and mmap for an
// entry that has no block yet (system calls, not libc's: libc's functions may be traced).
extern "C" void utramp_register_thread() {
  if (t_block) return;
  const pid_t tid = gettid_raw();
  for (size_t i = 0; i < kMaxThreads; ++i) {
    Entry& e = g_entries[i];
    uint32_t expected = 0;
    if (e.claimed.load(std::memory_order_relaxed) != 0) continue;
    if (!e.claimed.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) continue;
    // Claimed: the entry and its block are this thread's alone (the block of a thread
    // that exited is no longer written by anyone). Its tid goes in at once, so that
    // were this registration never resumed (a signal handler that interrupts it leaves
    // by longjmp), the releasing scan would still free the entry once the thread ends;
    // a scan meanwhile may read the block before it is zeroed, and waits longer for it.
    e.tid.store(tid, std::memory_order_release);
    // A block a dead thread used is zeroed by dropping its pages (MADV_DONTNEED: a
    // private anonymous mapping reads as zeros afterwards; it cannot fail for want of
    // memory, and leaves no hole for a scan reading it meanwhile), not by memset,
    // which may be a traced function whose stub would register this thread.
    ThreadBlock* b = e.block.load(std::memory_order_acquire);
    long r = 0;
    if (b) {
      r = arch::raw_syscall6(SYS_madvise, reinterpret_cast<long>(b), sizeof(ThreadBlock),
                             MADV_DONTNEED);
    } else {
      r = arch::raw_syscall6(SYS_mmap, 0, sizeof(ThreadBlock), PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (!(r < 0 && r > -4096)) {
        b = reinterpret_cast<ThreadBlock*>(r);
        e.block.store(b, std::memory_order_release);
        g_mapped.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (r < 0 && r > -4096) {  // no memory: stays unregistered, tries at its next entry
      e.tid.store(0, std::memory_order_release);
      e.claimed.store(0, std::memory_order_release);
      return;
    }
    size_t used = g_used.load(std::memory_order_relaxed);
    while (used < i + 1 && !g_used.compare_exchange_weak(used, i + 1, std::memory_order_release)) {
    }
    // Published before the stub's counters are used: the reclaimer's snapshot of a
    // batch that began after this point sees this thread (pairs with the acquire loads
    // in snapshot_counters).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (auto hook = g_register_hook.load(std::memory_order_acquire)) hook();
    // Set only if still null: a signal handler that interrupted this registration and
    // entered a stub may have registered this thread meanwhile (handlers run to the end
    // before this resumes). Its entry then stands and this one goes back, by this
    // thread's own hand (a scan that read it meanwhile saw a live thread's zero counts).
    ThreadBlock* none = nullptr;
    if (!__atomic_compare_exchange_n(&t_block, &none, b, false, __ATOMIC_SEQ_CST,
                                     __ATOMIC_RELAXED)) {
      e.tid.store(0, std::memory_order_release);
      e.claimed.store(0, std::memory_order_release);
    }
    return;
  }
  // 32768 threads inside stubs at once: this one stays unregistered and re-tries at its
  // next entry; the images it runs are then never reclaimed while it could be inside.
  // (Unreachable in practice: the kernel's default threads-max is lower per user.)
}

namespace {

// Calls `visit(tid)` for every registered thread whose block could be read:
// `read(block)` copies what the caller needs from it with process_vm_readv and returns
// false when the memory is gone. A thread that exited (its memory unmapped, or its tid
// gone) is skipped, and with `release` (only ever one such scan at a time: g_release_mu)
// its entry is released.
template <class Read, class Visit>
void for_each_thread(bool release, Read&& read, Visit&& visit) {
  const pid_t pid = getpid();
  const size_t n = g_used.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    Entry& e = g_entries[i];
    const pid_t tid = e.tid.load(std::memory_order_acquire);
    ThreadBlock* block = e.block.load(std::memory_order_acquire);
    if (!block || !tid) continue;  // free, or being claimed (its thread has not yet
                                   // used the counters: it is still in the stub's slow path)
    if (auto hook = g_scan_hook.load(std::memory_order_acquire)) hook(block, tid);
    if (!read(block) || (syscall(SYS_tgkill, pid, tid, 0) != 0 && errno == ESRCH)) {
      // The thread is gone. Only the releasing scan changes an entry claimed by
      // another thread, so it still holds (block, tid). Its tid is cleared first: a
      // thread may claim the entry as soon as it is unclaimed, and then stores its own
      // tid (pairs with the acquire loads above: a scan that reads the entry afterwards
      // reads 0 or the new tid, never this one). The block stays with the entry.
      if (release) {
        e.tid.store(0, std::memory_order_release);
        e.claimed.store(0, std::memory_order_release);
      }
      continue;
    }
    visit(tid);
  }
}

bool read_remote(void* dst, const void* src, size_t n) {
  iovec local{dst, n};
  iovec remote{const_cast<void*>(src), n};
  return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
}

}  // namespace

void backoff(unsigned spins) {
  if (spins < 64) {
    sched_yield();
  } else {
    timespec ts{0, 50 * 1000};
    nanosleep(&ts, nullptr);
  }
}

CounterSnapshot snapshot_counters(const std::vector<uint32_t>& slots) {
  CounterSnapshot out;
  // A few slots (a detach's: two per retired image) are read one iovec each, in one
  // call; many, by copying all the thread's counters (8 KiB) at once.
  constexpr size_t kFew = 64;
  const bool few = !slots.empty() && slots.size() <= kFew;
  std::vector<uint32_t> buf(few ? slots.size() : kCounterSlots);
  std::vector<iovec> local, remote;
  if (few)
    for (size_t i = 0; i < slots.size(); ++i) local.push_back({&buf[i], sizeof(uint32_t)});
  auto read = [&](ThreadBlock* b) {
    if (!few) return read_remote(buf.data(), b->counters, buf.size() * sizeof(uint32_t));
    remote.clear();
    for (uint32_t s : slots) remote.push_back({&b->counters[s], sizeof(uint32_t)});
    const auto n = static_cast<ssize_t>(slots.size() * sizeof(uint32_t));
    return process_vm_readv(getpid(), local.data(), local.size(), remote.data(), remote.size(), 0) == n;
  };
  std::lock_guard lock(g_release_mu);
  for_each_thread(true, read, [&](pid_t tid) {
    std::vector<uint32_t> v;
    v.reserve(slots.size());
    if (few) v.assign(buf.begin(), buf.end());
    else
      for (uint32_t s : slots) v.push_back(buf[s]);
    out.values.push_back(std::move(v));
    out.tids.push_back(tid);
  });
  return out;
}

GuardSnapshot snapshot_guard(uint32_t prog) {
  GuardSnapshot out;
  uint64_t holder = 0;
  if (prog >= kProgSlots) return out;
  for_each_thread(false,
                  [&](ThreadBlock* b) { return read_remote(&holder, &b->active[prog], sizeof holder); },
                  [&](pid_t tid) {
                    out.tids.push_back(tid);
                    out.holders.push_back(holder);
                  });
  return out;
}

bool this_thread_runs(uint32_t prog, uint64_t frame) {
  const uint64_t h = prog < kProgSlots && t_block ? t_block->active[prog] : 0;
  return h && os::holder_still_runs(h, frame);
}

bool this_thread_in_program(uint64_t frame) {
  for (uint32_t g = 0; g < kProgSlots; ++g)
    if (this_thread_runs(g, frame)) return true;
  return false;
}

void set_scan_hook(void (*hook)(const ThreadBlock* block, int tid)) {
  g_scan_hook.store(hook, std::memory_order_release);
}

void set_register_hook(void (*hook)()) { g_register_hook.store(hook, std::memory_order_release); }

Result<uint32_t> alloc_counter_slot() {
  std::lock_guard lock(g_slot_mu);
  for (uint32_t i = g_first_free; i < kCounterSlots; ++i)
    if (g_counter_owners[i] == 0) {
      g_counter_owners[i] = 1;
      g_first_free = i + 1;
      return i;
    }
  g_first_free = kCounterSlots;
  // All taken: share the least-shared slot (the search starts after the last one shared,
  // so that owners spread over every slot).
  uint32_t best = g_next_shared % kCounterSlots;
  for (uint32_t k = 1; k < kCounterSlots; ++k) {
    const uint32_t i = (g_next_shared + k) % kCounterSlots;
    if (g_counter_owners[i] < g_counter_owners[best]) best = i;
  }
  ++g_counter_owners[best];
  g_next_shared = best + 1;
  return best;
}

void free_counter_slot(uint32_t slot) {
  std::lock_guard lock(g_slot_mu);
  if (slot < kCounterSlots && g_counter_owners[slot] > 0 && --g_counter_owners[slot] == 0)
    g_first_free = std::min(g_first_free, slot);
}
Result<uint32_t> alloc_prog_slot() { return alloc_in(g_prog_used, "program guard"); }
void free_prog_slot(uint32_t slot) { free_in(g_prog_used, slot); }

extern "C" uint64_t utramp_guard_left(uint64_t holder, uint64_t frame) {
  return os::holder_still_runs(holder, frame) ? 0 : 1;
}

}  // namespace utramp::tramp
