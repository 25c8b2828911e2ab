#include "patch/patcher.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "arch/arch.hpp"
#include "common/hex.hpp"
#include "os/maps.hpp"
#include "os/text_writer.hpp"
#include "patch/trap_table.hpp"

namespace utramp::patch {

namespace {

std::mutex g_mu;  // serialises batches and handler installation
// The handler the program had (or set since, through set_program_trap_action): where
// traps that are not ours go. Two slots so that a new one is written while the handler
// may be reading the other; g_prev points at the published slot (nullptr: none yet).
// Writers hold g_mu.
struct sigaction g_prev_slots[2];
std::atomic<const struct sigaction*> g_prev{nullptr};

void publish_prev(const struct sigaction& act) {
  const struct sigaction* cur = g_prev.load(std::memory_order_relaxed);
  struct sigaction* next = cur == &g_prev_slots[0] ? &g_prev_slots[1] : &g_prev_slots[0];
  *next = act;
  g_prev.store(next, std::memory_order_release);  // pairs with the acquire in forward()
}
std::atomic<TrapHook> g_hook{nullptr};
// The kernel's default action, when the program had none of its own.
const struct sigaction g_default_action{};
// A program handler installed with SA_RESETHAND, once it ran: the kernel's default
// action with the flags and mask the program gave (as the kernel keeps them). forward()
// cannot take g_mu: it writes this slot and points g_prev here.
struct sigaction g_reset_slot;

bool has_handler(const struct sigaction& a) { return a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN; }

struct Counters {
  std::atomic<uint64_t> batches{0}, ops{0}, writes{0}, syncs{0}, emulated{0}, restarted{0},
      forwarded{0};
} g_stats;

// A trap that is not utramp's, given to the program's action as the kernel would have:
// its handler with its flags and mask, or the kernel's own action.
void forward(int sig, siginfo_t* si, void* uc) {
  g_stats.forwarded.fetch_add(1, std::memory_order_relaxed);
  const struct sigaction* prev = g_prev.load(std::memory_order_acquire);
  struct sigaction p {};
  // One copy, of a slot a later publish does not write (a torn copy would need two
  // publishes during it: programs set a SIGTRAP handler once, if ever).
  if (prev) p = *prev;
  const bool handler = has_handler(p);
  // Ignored, a SIGTRAP that kill() sent is dropped; one the CPU raised (an int3 of the
  // program's own) is forced by the kernel: the default action, as for SIG_DFL.
  if (!handler && p.sa_handler == SIG_IGN && si->si_code <= 0) return;
  if (!handler) {
    // Nobody's: the default action (core dump), as without us.
    signal(sig, SIG_DFL);
    sigset_t block;  // pending until we return (SA_NODEFER leaves it unblocked here)
    sigemptyset(&block);
    sigaddset(&block, sig);
    pthread_sigmask(SIG_BLOCK, &block, nullptr);
    raise(sig);
    return;
  }
  // The program's SA_RESETHAND: the kernel's action again before its handler runs. Its
  // mask is blocked while the handler runs (sigreturn puts the thread's back), SIGTRAP
  // itself excepted: it stays deliverable (docs/attach.md, "Limits").
  if (p.sa_flags & SA_RESETHAND) {
    g_reset_slot = p;
    g_reset_slot.sa_handler = SIG_DFL;
    g_prev.compare_exchange_strong(prev, &g_reset_slot, std::memory_order_acq_rel);
  }
  sigset_t mask = p.sa_mask;
  sigdelset(&mask, SIGTRAP);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  if (p.sa_flags & SA_SIGINFO) p.sa_sigaction(sig, si, uc);
  else p.sa_handler(sig);
}

// Runs on the thread that hit an int3. Async-signal-safe: atomics and arithmetic only.
void on_sigtrap(int sig, siginfo_t* si, void* ucv) {
  auto* uc = static_cast<ucontext_t*>(ucv);
  // Traps raised by the CPU carry a positive si_code; kill()/tgkill() do not.
  if (si->si_code > 0) {
    const uint64_t at = arch::trap_address_from_ip(arch::ctx_ip(uc));
    if (TrapTable::Entry* e = TrapTable::instance().find(at)) {
      // A trap is explained by the batch in flight, or by one that has ended (the int3
      // is gone). Reading the emulation again after seeing an int3 covers a next batch
      // that published its emulation and wrote its int3 between our two reads.
      for (int attempt = 0; attempt < 2; ++attempt) {
        // Pairs with the release store in apply() that publishes the emulation before
        // the int3 is written.
        const Emulation em = TrapTable::unpack(e->emu.load(std::memory_order_acquire), at);
        if (em.kind == Emulation::Kind::call) {
          arch::ctx_emulate_call(uc, em.target, em.return_to);
          g_stats.emulated.fetch_add(1, std::memory_order_relaxed);
          return;
        }
        if (em.kind == Emulation::Kind::jump) {
          arch::ctx_set_ip(uc, em.target);
          g_stats.emulated.fetch_add(1, std::memory_order_relaxed);
          return;
        }
        if (*reinterpret_cast<volatile const uint8_t*>(at) != arch::kTrapByte) {
          arch::ctx_set_ip(uc, at);  // the batch ended after we trapped: run what is there
          g_stats.restarted.fetch_add(1, std::memory_order_relaxed);
          return;
        }
        std::atomic_thread_fence(std::memory_order_acquire);
      }
    }
  }
  if (TrapHook h = g_hook.load(std::memory_order_acquire); h && h(si, uc)) return;
  forward(sig, si, ucv);
}

bool ours(const struct sigaction& a) { return (a.sa_flags & SA_SIGINFO) && a.sa_sigaction == on_sigtrap; }

// Ours restarts the system calls a SIGTRAP sent with kill() interrupts as the program's
// handler would (with a default or ignored action the kernel would not interrupt them).
int restart_flag(const struct sigaction& program) {
  return !has_handler(program) || (program.sa_flags & SA_RESTART) ? SA_RESTART : 0;
}

Result<void> install_locked() {
  struct sigaction cur;
  if (sigaction(SIGTRAP, nullptr, &cur) != 0)
    return make_error(Errc::io, fmt::format("sigaction(SIGTRAP): {}", strerror(errno)));
  if (ours(cur)) return {};
  struct sigaction act;
  memset(&act, 0, sizeof act);
  act.sa_sigaction = on_sigtrap;
  act.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER | restart_flag(cur);
  sigemptyset(&act.sa_mask);
  publish_prev(cur);
  if (sigaction(SIGTRAP, &act, nullptr) != 0)
    return make_error(Errc::io, fmt::format("sigaction(SIGTRAP): {}", strerror(errno)));
  return {};
}

// One contiguous write: a cluster of ops close enough to share a single pwrite.
struct Cluster {
  uint64_t start = 0, end = 0;
  std::vector<size_t> ops;
};

constexpr uint64_t kMaxGap = 512;
constexpr uint64_t kMaxGapAlone = 4096;
constexpr uint64_t kMaxCluster = 64 * 1024;

bool keeps_trap(const PatchOp& op) {
  return op.keep_trap && !op.replacement.empty() && op.replacement[0] == arch::kTrapByte &&
         op.emulate.kind != Emulation::Kind::none;
}

}  // namespace

Result<void> install_trap_handler() {
  std::lock_guard lock(g_mu);
  return install_locked();
}

Result<void> set_program_trap_action(const struct sigaction* act, struct sigaction* old) {
  std::lock_guard lock(g_mu);
  struct sigaction cur;
  if (sigaction(SIGTRAP, nullptr, &cur) != 0)
    return make_error(Errc::io, fmt::format("sigaction(SIGTRAP): {}", strerror(errno)));
  if (!ours(cur)) {
    // Ours is not installed (yet): the program's handler is the kernel's, and
    // install_locked() chains to it when a batch needs ours.
    if (sigaction(SIGTRAP, act, old) != 0)
      return make_error(Errc::io, fmt::format("sigaction(SIGTRAP): {}", strerror(errno)));
    return {};
  }
  const struct sigaction* prev = g_prev.load(std::memory_order_relaxed);
  if (old) {
    if (prev) *old = *prev;
    else {
      memset(old, 0, sizeof *old);
      old->sa_handler = SIG_DFL;
    }
  }
  if (act) {
    publish_prev(*act);
    if ((cur.sa_flags & SA_RESTART) != restart_flag(*act)) {
      cur.sa_flags = (cur.sa_flags & ~SA_RESTART) | restart_flag(*act);
      (void)sigaction(SIGTRAP, &cur, nullptr);
    }
  }
  return {};
}

Result<void> restore_program_trap_action() {
  std::lock_guard lock(g_mu);
  struct sigaction cur;
  if (sigaction(SIGTRAP, nullptr, &cur) != 0)
    return make_error(Errc::io, fmt::format("sigaction(SIGTRAP): {}", strerror(errno)));
  if (!ours(cur)) return {};
  const struct sigaction* prev = g_prev.load(std::memory_order_acquire);
  const struct sigaction program = prev ? *prev : g_default_action;
  if (sigaction(SIGTRAP, &program, nullptr) != 0)
    return make_error(Errc::io, fmt::format("sigaction(SIGTRAP): {}", strerror(errno)));
  g_prev.store(nullptr, std::memory_order_release);
  return {};
}

void set_trap_hook(TrapHook hook) { g_hook.store(hook, std::memory_order_release); }

void fork_lock() { g_mu.lock(); }
void fork_unlock() { g_mu.unlock(); }

PatchStats stats() {
  PatchStats s;
  s.batches = g_stats.batches.load();
  s.ops = g_stats.ops.load();
  s.writes = g_stats.writes.load();
  s.syncs = g_stats.syncs.load();
  s.traps_emulated = g_stats.emulated.load();
  s.traps_restarted = g_stats.restarted.load();
  s.traps_forwarded = g_stats.forwarded.load();
  return s;
}

Result<void> apply(std::span<const PatchOp> all) {
  std::lock_guard lock(g_mu);
  UTRAMP_TRY(install_locked());
  // /proc/self/maps costs ~100 us to read, far more than a batch's writes and syncs.
  // The shared copy (os::maps_copy: kept while nothing was unmapped, with the arena's
  // own chunks) while every op lies in an executable mapping of it; read again
  // otherwise (a new object, new executable memory, or a real refusal).
  auto copy = os::maps_copy();
  bool stale = !copy;
  for (size_t i = 0; i < all.size() && !stale; ++i)
    stale = !os::range_executable(**copy, all[i].addr, std::max<size_t>(all[i].replacement.size(), 1));
  if (stale) copy = os::maps_copy(true);
  if (!copy) return std::move(copy).error();
  const std::vector<os::Mapping>* maps = copy->get();

  // 0. Validate everything before writing anything.
  std::vector<size_t> todo;
  // Int3s that stay and only change where they send threads: published when the batch
  // commits, not before (a batch that fails changes nothing).
  std::vector<std::pair<TrapTable::Entry*, uint64_t>> retargeted;
  for (size_t i = 0; i < all.size(); ++i) {
    const PatchOp& op = all[i];
    const size_t n = op.replacement.size();
    if (n == 0 || n != op.expected.size() || n > arch::kMaxInsnLen + arch::kSiteLen)
      return make_error(Errc::invalid_argument,
                        fmt::format("{} ({:#x}): replacement of {} bytes for {} expected bytes",
                                    op.name(), op.addr, n, op.expected.size()));
    const os::Mapping* m = os::find_mapping(*maps, op.addr);
    if (!os::range_executable(*maps, op.addr, n))
      return make_error(Errc::not_executable,
                        fmt::format("{} ({:#x}): not in executable memory ({})", op.name(), op.addr,
                                    m ? fmt::format("mapping {:#x}-{:#x} {}{}{}", m->start, m->end,
                                                    m->r ? 'r' : '-', m->w ? 'w' : '-',
                                                    m->x ? 'x' : '-')
                                      : std::string("unmapped")));
    std::span<const uint8_t> now(reinterpret_cast<const uint8_t*>(op.addr), n);
    if (std::equal(now.begin(), now.end(), op.replacement.begin())) {
      // Already so. An int3 that stays may still change where it sends threads (one
      // atomic store: a thread that trapped reads the old target or the new one).
      if (keeps_trap(op)) {
        TrapTable::Entry* e = TrapTable::instance().insert(op.addr);
        if (!e) return make_error(Errc::no_memory, "trap table full");
        retargeted.emplace_back(e, TrapTable::pack(op.emulate, op.addr));
      }
      continue;
    }
    if (!std::equal(now.begin(), now.end(), op.expected.begin()))
      return make_error(Errc::bytes_mismatch,
                        fmt::format("{} ({:#x}): bytes seen {}, expected {}; someone else changed "
                                    "this code, nothing was patched",
                                    op.name(), op.addr, hex_bytes(now), hex_bytes(op.expected)));
    todo.push_back(i);
  }
  auto publish_retargeted = [&] {
    for (const auto& [e, emu] : retargeted) e->emu.store(emu, std::memory_order_release);
  };
  if (todo.empty()) {
    publish_retargeted();
    return {};
  }
  std::sort(todo.begin(), todo.end(), [&](size_t a, size_t b) { return all[a].addr < all[b].addr; });
  for (size_t k = 1; k < todo.size(); ++k) {
    const PatchOp& a = all[todo[k - 1]];
    if (a.addr + a.replacement.size() > all[todo[k]].addr)
      return make_error(Errc::invalid_argument,
                        fmt::format("{} ({:#x}) and {} ({:#x}) overlap", a.name(), a.addr,
                                    all[todo[k]].name(), all[todo[k]].addr));
  }

  // A process where no other thread may run the program's code (the agent's start-up,
  // before main; os::thread_count() explains who is not counted) gets each op's bytes in
  // one write, with no int3 and one sync: nothing can execute a site while it is
  // written, and the one thread that could, this one, takes no signal in between
  // (blocked during the writes: a short write would otherwise leave an op half written
  // for a handler to run). A thread made later finds every op whole.
  const auto threads = os::thread_count();
  const bool alone = threads && *threads == 1;
  // Ops this close share one write; the bytes between are written back as they are.
  // Alone, up to a page apart (no page without an op of its own is copied: written text
  // is a private copy) in writes of at most 64 KiB; bash's 1,621 relocated prologues
  // take ~7x fewer writes.
  const uint64_t max_gap = alone ? kMaxGapAlone : kMaxGap;
  std::vector<Cluster> clusters;
  for (size_t i : todo) {
    const PatchOp& op = all[i];
    const uint64_t end = op.addr + op.replacement.size();
    if (!clusters.empty()) {
      Cluster& c = clusters.back();
      const os::Mapping* m = os::find_mapping(*maps, c.start);
      if (op.addr - c.end <= max_gap && (!alone || end - c.start <= kMaxCluster) && m && end <= m->end) {
        c.end = end;
        c.ops.push_back(i);
        continue;
      }
    }
    clusters.push_back({op.addr, end, {i}});
  }

  // Writes one step: for every op, `bytes(op)` over [op.addr + from, op.addr + to), a
  // cluster at a time through one buffer (a buffer per cluster held a copy of all the
  // text patched, 255 KB of a tracer's 1,000 functions, at the start-up's heap peak).
  std::vector<uint8_t> buf;
  auto write_step = [&](size_t from, size_t to, auto&& bytes_of) -> Result<void> {
    // Alone, not the signals a fault raises (a probe's int3 on pwrite: a blocked SIGTRAP
    // the CPU raises kills the process); those do not arrive between two of our system
    // calls.
    sigset_t all_signals, old;
    if (alone) {
      sigfillset(&all_signals);
      for (int sig : {SIGTRAP, SIGSEGV, SIGBUS, SIGILL, SIGFPE}) sigdelset(&all_signals, sig);
      pthread_sigmask(SIG_BLOCK, &all_signals, &old);
    }
    Result<void> r;
    for (size_t ci = 0; ci < clusters.size() && r; ++ci) {
      const Cluster& c = clusters[ci];
      buf.assign(reinterpret_cast<const uint8_t*>(c.start), reinterpret_cast<const uint8_t*>(c.end));
      bool any = false;
      for (size_t i : c.ops) {
        const PatchOp& op = all[i];
        const size_t n = std::min(to, op.replacement.size());
        for (size_t k = from; k < n; ++k) {
          uint8_t& b = buf[op.addr - c.start + k];
          any = any || b != bytes_of(op, k);  // an unchanged step writes nothing
          b = bytes_of(op, k);
        }
      }
      if (!any) continue;
      g_stats.writes.fetch_add(1, std::memory_order_relaxed);
      r = os::write_text(c.start, buf);
    }
    if (alone) pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return r;
  };
  auto sync = [&]() -> Result<void> {
    g_stats.syncs.fetch_add(1, std::memory_order_relaxed);
    return os::sync_cores();
  };
  auto rollback = [&](const Error& why) -> Error {
    // Best effort: put the expected bytes back, tail first, then byte 0 (alone: at once).
    auto expected = [](const PatchOp& op, size_t k) { return op.expected[k]; };
    if (alone) {
      (void)write_step(0, SIZE_MAX, expected);
    } else {
      (void)write_step(1, SIZE_MAX, expected);
      (void)sync();
      (void)write_step(0, 1, expected);
    }
    (void)sync();
    for (size_t i : todo)
      if (auto* e = TrapTable::instance().find(all[i].addr)) e->emu.store(0, std::memory_order_release);
    return make_error(why.code, fmt::format("patch batch failed and was rolled back: {}", why.message));
  };

  // Publish how trapped threads are sent on before any int3 can send them to us. Alone,
  // no thread can trap mid-batch (no int3 is written but one that stays): only those
  // need an entry, and the table's pages are not faulted in for every op (1,000 sites'
  // entries took ~250 page faults of a recording's start-up).
  for (size_t i : todo) {
    if (alone && !keeps_trap(all[i])) continue;
    TrapTable::Entry* e = TrapTable::instance().insert(all[i].addr);
    if (!e) return make_error(Errc::no_memory, "trap table full");
    e->emu.store(TrapTable::pack(all[i].emulate, all[i].addr), std::memory_order_release);
  }

  auto write_steps_live = [&]() -> Result<void> {
    // 1. int3 over byte 0; from here on a thread reaching any site traps.
    UTRAMP_TRY(write_step(0, 1, [](const PatchOp&, size_t) { return arch::kTrapByte; }));
    UTRAMP_TRY(sync());
    // 2. The tail: no thread can be executing it, since byte 0 traps.
    UTRAMP_TRY(write_step(1, SIZE_MAX, [](const PatchOp& op, size_t k) { return op.replacement[k]; }));
    UTRAMP_TRY(sync());
    // 3. Byte 0: the new instruction is whole.
    UTRAMP_TRY(write_step(0, 1, [](const PatchOp& op, size_t k) { return op.replacement[k]; }));
    return sync();
  };
  if (alone) {
    if (auto r = write_step(0, SIZE_MAX, [](const PatchOp& op, size_t k) { return op.replacement[k]; }); !r)
      return rollback(r.error());
    if (auto r = sync(); !r) return rollback(r.error());
  } else if (auto r = write_steps_live(); !r) {
    return rollback(r.error());
  }
  // Withdraw the emulations: a late trap now finds the int3 gone and restarts. An int3
  // that stays keeps its emulation: it is what the site does from now on.
  // (Alone, an op has an entry only if an earlier batch made one.)
  for (size_t i : todo)
    if (!keeps_trap(all[i]))
      if (TrapTable::Entry* e = TrapTable::instance().find(all[i].addr)) e->emu.store(0, std::memory_order_release);
  publish_retargeted();

  g_stats.batches.fetch_add(1, std::memory_order_relaxed);
  g_stats.ops.fetch_add(todo.size(), std::memory_order_relaxed);
  return {};
}

}  // namespace utramp::patch
