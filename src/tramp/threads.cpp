#include "tramp/threads.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <mutex>

#include "arch/cpu.hpp"
#include "common/init.hpp"
#include "os/signal_stack.hpp"

namespace utramp::tramp {

namespace {

alignas(64) thread_local ThreadBlock t_block __attribute__((tls_model("initial-exec")));

// The registry: one entry per thread that has entered a stub. A thread claims a free
// entry with a compare-and-swap of its block's address, so registering takes no lock and
// allocates nothing: generated code registers a thread on its first entry into any stub,
// which may happen inside a signal handler, inside the allocator, or while this thread
// holds one of utramp's locks. In .bss: pages never used cost nothing.
//
// Entries of threads that exited are released by one scan at a time (snapshot_counters,
// under g_release_mu); every other scan only reads. A second releaser would be unsound:
// a scan that read (block B, tid T) of a dead thread, then saw T gone, could clear the
// entry after another scan had released it and a new thread, whose TLS block lies at
// the same address B (its stack is the dead thread's, reused), had claimed it again;
// that thread, `registered` set, would never be seen again. With one releaser an entry
// it has read changes only by its own hand (claims take free entries only).
inline constexpr size_t kMaxThreads = 1 << 15;
struct Entry {
  std::atomic<ThreadBlock*> block{nullptr};
  std::atomic<pid_t> tid{0};
};
Entry g_entries[kMaxThreads];
std::atomic<size_t> g_used{0};  // entries [0, g_used) may be in use

std::mutex g_release_mu;  // the one scan that may release entries (snapshot_counters)
std::mutex g_slot_mu;     // the slot bitmaps below (attach and reclamation only)
std::atomic<void (*)(const ThreadBlock*, int)> g_scan_hook{nullptr};
// How many owners (trampolines, images) each counter slot has: 0 free. See
// alloc_counter_slot().
std::array<uint32_t, kCounterSlots> g_counter_owners{};
uint32_t g_next_shared = 0;  // where the search for the least-shared slot starts
std::array<bool, kProgSlots> g_prog_used{};

// From the kernel, not libc's syscall(): generated code registers a thread on its first
// entry into a stub, and libc's functions may be traced (`record --libs`).
pid_t gettid_raw() { return static_cast<pid_t>(arch::raw_syscall6(SYS_gettid)); }

void reset_after_fork() {
  // Only the forking thread exists in the child.
  const size_t n = g_used.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    g_entries[i].tid.store(0, std::memory_order_relaxed);
    g_entries[i].block.store(nullptr, std::memory_order_relaxed);
  }
  g_used.store(0, std::memory_order_relaxed);
  new (&g_slot_mu) std::mutex();
  new (&g_release_mu) std::mutex();
  if (t_block.registered) {
    t_block.registered = 0;
    utramp_register_thread();
  }
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
  return TlsLayout{reinterpret_cast<int64_t>(&t_block.registered) - base,
                   reinterpret_cast<int64_t>(&t_block.counters[0]) - base,
                   reinterpret_cast<int64_t>(&t_block.active[0]) - base};
}

ThreadBlock& this_thread_block() { return t_block; }

// Async-signal-safe: a compare-and-swap per entry looked at, and gettid.
extern "C" void utramp_register_thread() {
  if (t_block.registered) return;
  const pid_t tid = gettid_raw();
  for (size_t i = 0; i < kMaxThreads; ++i) {
    ThreadBlock* expected = nullptr;
    if (g_entries[i].block.load(std::memory_order_relaxed) != nullptr) continue;
    if (!g_entries[i].block.compare_exchange_strong(expected, &t_block, std::memory_order_acq_rel))
      continue;
    g_entries[i].tid.store(tid, std::memory_order_release);
    size_t used = g_used.load(std::memory_order_relaxed);
    while (used < i + 1 && !g_used.compare_exchange_weak(used, i + 1, std::memory_order_release)) {
    }
    // Published before the stub's counters are used: the reclaimer's snapshot of a
    // batch that began after this point sees this thread (pairs with the acquire loads
    // in snapshot_counters).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    t_block.registered = 1;
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
    ThreadBlock* block = e.block.load(std::memory_order_acquire);
    const pid_t tid = e.tid.load(std::memory_order_acquire);
    if (!block || !tid) continue;  // free, or being claimed (its thread has not yet
                                   // used the counters: it is still in the stub's slow path)
    if (auto hook = g_scan_hook.load(std::memory_order_acquire)) hook(block, tid);
    if (!read(block) || (syscall(SYS_tgkill, pid, tid, 0) != 0 && errno == ESRCH)) {
      // The thread is gone (its memory unmapped, or reused by a thread that registers
      // itself anew). Only the releasing scan changes a claimed entry, so it still holds
      // (block, tid). Its tid is cleared first: a thread may claim the entry as soon as
      // the block is null, and then stores its own tid (pairs with the acquire loads
      // above: a scan that reads the new block reads 0 or the new tid, never this one).
      if (release) {
        e.tid.store(0, std::memory_order_release);
        e.block.store(nullptr, std::memory_order_release);
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

CounterSnapshot snapshot_counters(const std::vector<uint32_t>& slots) {
  CounterSnapshot out;
  std::vector<uint32_t> buf(kCounterSlots);
  std::lock_guard lock(g_release_mu);
  for_each_thread(
      true,
      [&](ThreadBlock* b) { return read_remote(buf.data(), b->counters, buf.size() * sizeof(uint32_t)); },
      [&](pid_t tid) {
        std::vector<uint32_t> v;
        v.reserve(slots.size());
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
  const uint64_t h = prog < kProgSlots ? t_block.active[prog] : 0;
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

Result<uint32_t> alloc_counter_slot() {
  std::lock_guard lock(g_slot_mu);
  for (uint32_t i = 0; i < kCounterSlots; ++i)
    if (g_counter_owners[i] == 0) {
      g_counter_owners[i] = 1;
      return i;
    }
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
  if (slot < kCounterSlots && g_counter_owners[slot] > 0) --g_counter_owners[slot];
}
Result<uint32_t> alloc_prog_slot() { return alloc_in(g_prog_used, "program guard"); }
void free_prog_slot(uint32_t slot) { free_in(g_prog_used, slot); }

extern "C" uint64_t utramp_guard_left(uint64_t holder, uint64_t frame) {
  return os::holder_still_runs(holder, frame) ? 0 : 1;
}

}  // namespace utramp::tramp
