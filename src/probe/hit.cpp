// The hit path of probes (see hit.hpp): the SIGTRAP hook, the detour callback, return
// probes' entry and return, and the SRCU that lets the manager free what readers saw.
//
// Compiled with -mgeneral-regs-only and never instrumented: detours and the return
// trampoline call into this file with the interrupted code's vector registers live, and
// save them (arch::xstate_save) only around a handler that may change them.
#include "probe/hit.hpp"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "arch/cpu.hpp"
#include "arch/probe.hpp"
#include "os/text_writer.hpp"
#include "os/thread_memory.hpp"
#include "patch/patcher.hpp"
#include "tramp/threads.hpp"

#define UTRAMP_HIT __attribute__((no_sanitize("address", "undefined")))

namespace utramp::probe {

namespace {

// ---- SRCU ---------------------------------------------------------------------------------
//
// Readers (any thread, signal context included) count themselves in one of two counters,
// chosen by the epoch's parity, spread over shards so that threads rarely share a cache
// line:
//
//   lock:    idx = epoch & 1; shard.n[idx] += 1 (seq_cst)   then read the pointers
//   unlock:  shard.n[idx] -= 1
//
// srcu_synchronize() flips the epoch and waits for the old parity's counters to drain,
// twice. A reader that read the epoch before a flip but counted itself after the wait
// saw the counter at zero reads its pointers after the flip, hence after the writer
// unpublished them (the flip is a seq_cst RMW after the unpublishing store; the reader's
// count is a seq_cst RMW before its loads). The second flip covers a reader that read
// the epoch two flips ago and counted itself late on the parity the first wait did not
// examine.
//
// Those counters are shared by the threads of a shard: each count is a locked
// instruction, two per hit (of ~30 ns a hit costs, a third). Where the process can have
// every thread's memory barrier on demand (membarrier, os::sync_cores) a thread counts
// itself in a counter of its own instead, with plain instructions: its slot of the
// per-thread counters the trampolines' reclamation reads (tramp/threads.hpp; the slot is
// this SRCU's alone). srcu_synchronize() then also makes every thread of the process
// pass a full barrier, and waits until it has seen each thread's counter at zero: a
// reader whose count the barrier found in its store buffer is flushed and seen; one
// that counted itself after its barrier reads its pointers after it, hence after the
// writer unpublished them. A thread is registered (given its counters) on its first
// hit, with the extended state saved around it (arch::call_saving_xstate: that code is
// not general-purpose-only); one that cannot be uses the shards.
constexpr unsigned kShards = 64;
struct alignas(64) Shard {
  std::atomic<int64_t> n[2];
};
Shard g_shards[kShards];
std::atomic<uint64_t> g_epoch{0};
// Bumped in the child of fork(): counts of threads that did not survive are zeroed, and
// a reader that began before the fork (the forking thread itself) does not decrement.
std::atomic<uint32_t> g_fork_gen{0};

// Per-thread counting (above): the offset of the thread's counters block pointer from
// the thread pointer, and the slot; g_per_thread false: shards only.
bool g_per_thread = false;
int64_t g_block_off = 0;
uint32_t g_srcu_slot = 0;

uint64_t register_thread(uint64_t, uint64_t) {
  tramp::utramp_register_thread();
  return 0;
}

UTRAMP_HIT inline uint32_t* thread_counter() noexcept {
  auto block = [] { return *reinterpret_cast<tramp::ThreadBlock* const*>(arch::thread_pointer() + g_block_off); };
  tramp::ThreadBlock* b = block();
  if (__builtin_expect(b == nullptr, 0)) {
    arch::call_saving_xstate(&register_thread, 0, 0);
    b = block();
  }
  return b ? &b->counters[g_srcu_slot] : nullptr;
}

struct ReadSide {
  uint32_t* counter;  // this thread's own (per-thread counting), else null: the shards
  uint32_t shard, idx, fork_gen;
};

UTRAMP_HIT inline ReadSide read_lock() noexcept {
  ReadSide r;
  if (g_per_thread && (r.counter = thread_counter())) {
    // Only this thread writes it; a signal handler's hit in between leaves it as it was.
    __atomic_store_n(r.counter, __atomic_load_n(r.counter, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // counted before the pointers are read
    return r;
  }
  r.counter = nullptr;
  r.shard = static_cast<uint32_t>((arch::thread_pointer() * 0x9e3779b97f4a7c15ull) >> 58);
  r.fork_gen = g_fork_gen.load(std::memory_order_relaxed);
  r.idx = static_cast<uint32_t>(g_epoch.load(std::memory_order_seq_cst) & 1);
  g_shards[r.shard].n[r.idx].fetch_add(1, std::memory_order_seq_cst);
  return r;
}

UTRAMP_HIT inline void read_unlock(const ReadSide& r) noexcept {
  if (r.counter) {
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the pointers read before
    __atomic_store_n(r.counter, __atomic_load_n(r.counter, __ATOMIC_RELAXED) - 1, __ATOMIC_RELEASE);
    return;
  }
  if (g_fork_gen.load(std::memory_order_relaxed) != r.fork_gen) return;
  g_shards[r.shard].n[r.idx].fetch_sub(1, std::memory_order_release);
}

// This process's id, kept so the hit path calls no libc function but syscall() (which
// the site table blacklists): set at installation and in the child of a fork.
pid_t g_pid = 0;

void srcu_after_fork_child() {
  g_pid = getpid();
  for (Shard& s : g_shards) {
    s.n[0].store(0, std::memory_order_relaxed);
    s.n[1].store(0, std::memory_order_relaxed);
  }
  g_fork_gen.fetch_add(1, std::memory_order_seq_cst);
}

// ---- per-thread state ----------------------------------------------------------------------

// Initial-exec TLS: a fixed offset from %fs, no allocation, safe in signal handlers.
#define UTRAMP_TLS __attribute__((tls_model("initial-exec")))

// Depth of probe handlers running on this thread: a probe hit while one runs (the
// handler calls probed code, or a signal handler does) runs no handler and counts a
// miss, as the kernel's kprobes do; the displaced instruction still executes.
thread_local uint32_t t_depth UTRAMP_TLS = 0;

// The return stack of this thread. Entries are pushed by reserving first (top+1) and
// filling after, and popped by reading first and releasing after, so that a signal
// handler interrupting either on this thread (and hitting a return probe itself) works
// on the entries above and never sees a half-written one as valid.
struct RetEntry {
  uint64_t ra;      // the original return address
  uint64_t sp;      // where it was on the stack (rsp at the function's entry)
  uint32_t slot, gen;
  volatile uint32_t valid;
  uint32_t pad;
};
struct RetStack {
  volatile uint32_t top;
  RetEntry e[kRetDepth];
};
// Mapped on the thread's first return probe entry (os/thread_memory.hpp: at 4 KB it is
// more than a library loaded into a running process may have of initial-exec TLS).
thread_local RetStack* t_rs UTRAMP_TLS = nullptr;

RetprobeSlot g_rp_slots[kMaxRetprobes];

inline void signal_fence() { std::atomic_signal_fence(std::memory_order_seq_cst); }

// ---- the table of trap addresses ----------------------------------------------------------

struct HitEntry {
  std::atomic<uint64_t> addr;
  std::atomic<uint64_t> val;  // ProbeSite* | TrapKind
};
constexpr unsigned kHitBits = 18;
constexpr uint64_t kHitCap = uint64_t{1} << kHitBits;
HitEntry g_hits[kHitCap];  // zero-initialised .bss, touched lazily
uint64_t g_hits_used = 0;

UTRAMP_HIT inline uint64_t hit_slot(uint64_t a) noexcept {
  return (a * 0x9e3779b97f4a7c15ull) >> (64 - kHitBits);
}

UTRAMP_HIT const HitEntry* hit_find(uint64_t addr) noexcept {
  for (uint64_t i = hit_slot(addr), n = 0; n < kHitCap; i = (i + 1) & (kHitCap - 1), ++n) {
    const HitEntry& e = g_hits[i];
    const uint64_t a = e.addr.load(std::memory_order_acquire);
    if (a == addr) return &e;
    if (a == 0) return nullptr;
  }
  return nullptr;
}

// ---- running handlers -------------------------------------------------------------------------

// A buffer for the extended state, on this stack frame.
#define UTRAMP_XSTATE_BUF(name, needed)                                                \
  void* name = nullptr;                                                                \
  if (needed) {                                                                        \
    char* raw_##name = static_cast<char*>(__builtin_alloca(arch::xstate_size() + 64)); \
    name = reinterpret_cast<void*>((reinterpret_cast<uint64_t>(raw_##name) + 63) & ~uint64_t{63}); \
  }

UTRAMP_HIT void count_misses(const ProbeList* l) noexcept {
  for (uint32_t i = 0; i < l->n; ++i) l->items[i]->misses.fetch_add(1, std::memory_order_relaxed);
}

UTRAMP_HIT bool safe_read(uint64_t addr, uint64_t* out) noexcept {
  iovec local{out, sizeof *out};
  iovec remote{reinterpret_cast<void*>(addr), sizeof *out};
  return syscall(SYS_process_vm_readv, g_pid, &local, 1, &remote, 1, 0) == sizeof *out;
}

UTRAMP_HIT Probe* live_retprobe(uint32_t slot, uint32_t gen) noexcept {
  if (slot >= kMaxRetprobes) return nullptr;
  RetprobeSlot& s = g_rp_slots[slot];
  if (s.gen.load(std::memory_order_seq_cst) != gen) return nullptr;
  return s.probe.load(std::memory_order_seq_cst);
}

// Drops entry `i` and everything above it as stale (their frames are gone): each is a
// return that will not be seen, counted as a miss of its probe.
UTRAMP_HIT void drop_from(RetStack& st, uint32_t i) noexcept {
  for (uint32_t k = st.top; k > i; --k) {
    const RetEntry& e = st.e[k - 1];
    if (!e.valid) continue;
    if (Probe* p = live_retprobe(e.slot, e.gen)) p->misses.fetch_add(1, std::memory_order_relaxed);
  }
  signal_fence();
  st.top = i;
}

// A return probe's entry: the function is entered with its return address at regs->rsp.
UTRAMP_HIT void retprobe_entry(Probe* p, arch::PtRegs* r) noexcept {
  RetStack* stack = t_rs;
  if (!stack)
    stack = static_cast<RetStack*>(
        os::map_thread_memory(reinterpret_cast<void**>(&t_rs), sizeof(RetStack)));
  if (!stack) {  // no memory for it: this return is not probed
    p->misses.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  RetStack& st = *stack;
  const uint64_t sp = r->rsp;
  const uint64_t tramp = arch::retprobe_trampoline();
  // Instances whose frames are gone (a longjmp, or an unwind we did not see):
  //  - one whose slot is `sp` is over: that slot holds this call's return address now;
  //    so is everything pushed after it (deeper frames, or signal contexts that cannot
  //    still be live while this frame is);
  //  - on top, one below `sp` whose slot no longer holds the trampoline was reused.
  // One below `sp` that still holds it is kept: it may belong to another stack (a
  // sigaltstack above this one); it goes when its slot is reused or matched.
  // (A slot that holds the trampoline already was hijacked by another return probe of
  // this same hit: its instance is live, and this one chains after it.)
  const bool chained = *reinterpret_cast<volatile const uint64_t*>(sp) == tramp;
  for (uint32_t k = st.top; k > 0 && !chained; --k) {
    const RetEntry& e = st.e[k - 1];
    if (!e.valid || e.sp > sp) break;
    if (e.sp == sp) {
      drop_from(st, k - 1);
      break;
    }
  }
  while (st.top > 0) {
    const RetEntry& e = st.e[st.top - 1];
    if (!e.valid || e.sp >= sp) break;
    uint64_t now = 0;
    if (safe_read(e.sp, &now) && now == tramp) break;
    drop_from(st, st.top - 1);
  }
  uint32_t active = 0;
  for (uint32_t k = 0; k < st.top; ++k)
    if (st.e[k].valid && st.e[k].slot == p->rp_slot && st.e[k].gen == p->rp_gen) ++active;
  if (active >= p->maxactive || st.top >= kRetDepth) {
    p->misses.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const uint32_t i = st.top;
  st.e[i].valid = 0;
  signal_fence();
  st.top = i + 1;  // reserved: a nested push goes above
  signal_fence();
  st.e[i].ra = *reinterpret_cast<volatile uint64_t*>(sp);
  st.e[i].sp = sp;
  st.e[i].slot = p->rp_slot;
  st.e[i].gen = p->rp_gen;
  signal_fence();
  st.e[i].valid = 1;
  *reinterpret_cast<volatile uint64_t*>(sp) = tramp;
}

// Runs the pre-handlers (and return probes' entries) of `l` on `r`, with the extended
// state saved in `xbuf` around handlers that may change it (null in signal context,
// where the kernel saved it). True when a handler returned non-zero: the displaced
// instruction is skipped and execution continues at r->rip.
UTRAMP_HIT bool run_pre(const ProbeList* l, arch::PtRegs* r, void* xbuf) noexcept {
  bool saved = false, skip = false;
  for (uint32_t i = 0; i < l->n && !skip; ++i) {
    Probe* p = l->items[i];
    if (p->kind == ProbeKind::probe && p->count_hits) p->hits.fetch_add(1, std::memory_order_relaxed);
    if (p->pre) {
      if (xbuf && !p->pre_gprs_only && !saved) {
        arch::xstate_save(xbuf);
        saved = true;
      }
      const uint64_t rip = r->rip;
      const int rc = p->pre(r, p->cookie);
      if (p->kind == ProbeKind::retprobe) {
        r->rip = rip;  // an entry handler decides about its instance, not about the flow
        if (rc != 0) continue;
      } else if (rc != 0) {
        skip = true;
        break;
      }
    }
    if (p->kind == ProbeKind::retprobe) retprobe_entry(p, r);
  }
  if (saved) arch::xstate_restore(xbuf);
  return skip;
}

UTRAMP_HIT void run_post(const ProbeList* l, arch::PtRegs* r) noexcept {
  for (uint32_t i = 0; i < l->n; ++i) {
    Probe* p = l->items[i];
    if (p->kind == ProbeKind::probe && p->post) p->post(r, p->cookie);
  }
}

// ---- int3 --------------------------------------------------------------------------------

UTRAMP_HIT void on_int3(ProbeSite* s, ucontext_t* uc) noexcept {
  const ReadSide rs = read_lock();
  const ProbeList* l = s->list.load(std::memory_order_seq_cst);
  arch::PtRegs r;
  arch::regs_from_context(uc, &r);
  r.rip = s->addr;
  bool skip = false, post = false;
  if (l && l->n) {
    if (t_depth) {
      count_misses(l);
    } else {
      ++t_depth;
      skip = run_pre(l, &r, nullptr);
      --t_depth;
      post = l->any_post;
    }
  }
  if (skip) {
    arch::regs_to_context(r, uc, true);
  } else if (s->ool.kind == arch::OutOfLine::Kind::emulate) {
    // Control flow: computed here, so it costs no second trap, even with post-handlers.
    r.rip = s->addr;
    arch::emulate(s->ool.emu, &r);
    if (post) {
      ++t_depth;
      run_post(l, &r);
      --t_depth;
    }
    arch::regs_to_context(r, uc, true);
  } else {
    arch::regs_to_context(r, uc, false);
    arch::ctx_set_ip(uc, post ? s->slot_post : s->slot);
  }
  read_unlock(rs);
}

// The int3 after the displaced instruction in the post slot.
UTRAMP_HIT void on_post_trap(ProbeSite* s, ucontext_t* uc) noexcept {
  const ReadSide rs = read_lock();
  const ProbeList* l = s->list.load(std::memory_order_seq_cst);
  arch::PtRegs r;
  arch::regs_from_context(uc, &r);
  r.rip = s->addr + s->len;  // where the instruction went, in the original code
  if (l && l->any_post) {
    if (t_depth) {
      // Not reached: a nested hit never takes the post slot.
    } else {
      ++t_depth;
      run_post(l, &r);
      --t_depth;
    }
  }
  arch::regs_to_context(r, uc, true);
  read_unlock(rs);
}

// The SIGTRAP hook (patch::set_trap_hook). Async-signal-safe: atomics, arithmetic, and
// the handlers the user registered.
UTRAMP_HIT bool trap_hook(siginfo_t* si, ucontext_t* uc) {
  if (si->si_code <= 0) return false;  // sent by kill()/tgkill(), not raised by an int3
  const uint64_t at = arch::trap_address_from_ip(arch::ctx_ip(uc));
  if (at == arch::redirect_trap()) {
    // A detour whose handler redirected: every register from the regs it left (rbx).
    arch::regs_to_context(*arch::redirect_regs(uc), uc, true);
    return true;
  }
  const HitEntry* e = hit_find(at);
  if (!e) return false;
  const uint64_t v = e->val.load(std::memory_order_acquire);
  auto* s = reinterpret_cast<ProbeSite*>(v & ~uint64_t{7});
  if (static_cast<TrapKind>(v & 7) == TrapKind::post) {
    on_post_trap(s, uc);
    return true;
  }
  // `armed` first: detach restores the byte, syncs every core, and only then disarms
  // (pairs with the seq_cst store in Manager::Impl::commit), so a thread preempted
  // between the two reads that finds the site disarmed finds the byte restored too.
  const bool armed = s->armed.load(std::memory_order_seq_cst);
  if (*reinterpret_cast<volatile const uint8_t*>(at) != arch::kTrapByte) {
    arch::ctx_set_ip(uc, at);  // our int3 was removed after this thread hit it: run what is there
    return true;
  }
  if (!armed) return false;  // someone else's int3
  on_int3(s, uc);
  return true;
}

// ---- return trampoline callbacks ------------------------------------------------------------

[[noreturn]] void no_record(uint64_t slot_addr) {
  static const char msg[] =
      "utramp: return probe: no record of a hijacked return address on this thread; "
      "cannot return\n";
  (void)!write(2, msg, sizeof msg - 1);
  (void)slot_addr;
  abort();
}

// Finds the instance whose return address lived at `slot_addr`; drops the instances
// above it (frames left by longjmp) and it; returns it.
UTRAMP_HIT RetEntry take_instance(uint64_t slot_addr) noexcept {
  if (!t_rs) no_record(slot_addr);
  RetStack& st = *t_rs;
  for (uint32_t k = st.top; k > 0; --k) {
    RetEntry& e = st.e[k - 1];
    if (!e.valid || e.sp != slot_addr) continue;
    const RetEntry found = e;
    signal_fence();
    e.valid = 0;         // consumed, not missed
    drop_from(st, k - 1);  // the ones above are stale
    return found;
  }
  no_record(slot_addr);
}

UTRAMP_HIT void run_return_handler(const RetEntry& e, arch::PtRegs* r) noexcept {
  Probe* p = live_retprobe(e.slot, e.gen);
  if (!p) return;  // detached since the call: just return
  if (!p->post) {
    p->hits.fetch_add(1, std::memory_order_relaxed);
  } else if (t_depth) {
    p->misses.fetch_add(1, std::memory_order_relaxed);
  } else {
    ++t_depth;
    p->hits.fetch_add(1, std::memory_order_relaxed);
    UTRAMP_XSTATE_BUF(xbuf, !p->post_gprs_only);
    if (xbuf) arch::xstate_save(xbuf);
    p->post(r, p->cookie);
    if (xbuf) arch::xstate_restore(xbuf);
    --t_depth;
  }
}

// Several return probes on one function hijack one frame in turn: each instance after
// the first holds the trampoline as its "original" return address. They are taken
// together, the last recorded first.
UTRAMP_HIT uint64_t rp_on_return(arch::PtRegs* r) {
  const ReadSide rs = read_lock();
  const uint64_t flags = r->eflags;
  const uint64_t tramp = arch::retprobe_trampoline();
  for (;;) {
    const RetEntry e = take_instance(r->rsp - 8);
    r->rip = e.ra;
    run_return_handler(e, r);
    if (e.ra != tramp) break;
  }
  r->eflags = (flags & ~arch::kUserFlags) | (r->eflags & arch::kUserFlags);
  const uint64_t to = r->rip;
  read_unlock(rs);
  return to;
}

UTRAMP_HIT uint64_t rp_unwound(uint64_t slot_addr) {
  const uint64_t tramp = arch::retprobe_trampoline();
  uint64_t ra;
  do ra = take_instance(slot_addr).ra;
  while (ra == tramp);
  return ra;
}

}  // namespace

RetprobeSlot* retprobe_slots() { return g_rp_slots; }

bool hit_table_insert(uint64_t addr, TrapKind kind, ProbeSite* site) {
  if (g_hits_used * 2 >= kHitCap) return false;
  const uint64_t val = reinterpret_cast<uint64_t>(site) | static_cast<uint64_t>(kind);
  for (uint64_t i = hit_slot(addr);; i = (i + 1) & (kHitCap - 1)) {
    HitEntry& e = g_hits[i];
    const uint64_t a = e.addr.load(std::memory_order_relaxed);
    if (a == addr) {
      e.val.store(val, std::memory_order_release);
      return true;
    }
    if (a == 0) {
      e.val.store(val, std::memory_order_relaxed);
      // Pairs with the acquire load in hit_find(): the entry is whole when visible.
      e.addr.store(addr, std::memory_order_release);
      ++g_hits_used;
      return true;
    }
  }
}

void install_hit_path() {
  static const bool once = [] {
    g_pid = getpid();
    // Per-thread read-side counts where every thread's barrier can be had on demand.
    if (auto slot = tramp::alloc_counter_slot(); slot && os::sync_cores()) {
      g_srcu_slot = *slot;
      g_block_off = tramp::tls_layout().block;
      g_per_thread = true;
    }
    arch::set_retprobe_callbacks({&rp_on_return, &rp_unwound});
    pthread_atfork(nullptr, nullptr, &srcu_after_fork_child);
    patch::set_trap_hook(&trap_hook);
    return true;
  }();
  (void)once;
}

using tramp::backoff;

void srcu_synchronize() {
  for (int pass = 0; pass < 2; ++pass) {
    const uint64_t old = g_epoch.fetch_add(1, std::memory_order_seq_cst) & 1;
    for (unsigned spins = 0;; ++spins) {
      int64_t sum = 0;
      for (const Shard& s : g_shards) sum += s.n[old].load(std::memory_order_seq_cst);
      if (sum <= 0) break;
      backoff(spins);
    }
  }
  if (!g_per_thread) return;
  // Every thread passes a full barrier (its count flushed), then each is seen out of
  // its read sections once (counter zero) or gone.
  for (unsigned spins = 0; !os::sync_cores(); ++spins) backoff(spins);  // it worked at installation
  std::vector<int> pending;
  for (unsigned spins = 0, first = 1;; ++spins, first = 0) {
    const tramp::CounterSnapshot snap = tramp::snapshot_counters({g_srcu_slot});
    std::vector<int> still;
    for (size_t i = 0; i < snap.tids.size(); ++i) {
      if (snap.values[i][0] == 0) continue;
      if (first || std::find(pending.begin(), pending.end(), snap.tids[i]) != pending.end())
        still.push_back(snap.tids[i]);
    }
    pending = std::move(still);
    if (pending.empty()) return;
    backoff(spins);
  }
}

bool in_probe_handler() noexcept { return t_depth != 0; }

UTRAMP_HIT uint64_t real_return_address(uint64_t ra, uint64_t slot) noexcept {
  const uint64_t tramp = arch::retprobe_trampoline();
  if (ra != tramp) return ra;
  if (!t_rs) return 0;  // no return probe ever ran on this thread
  const RetStack& st = *t_rs;
  for (uint32_t k = st.top; k > 0; --k) {
    const RetEntry& e = st.e[k - 1];
    if (e.valid && e.sp == slot && e.ra != tramp) return e.ra;
  }
  return 0;
}

UTRAMP_HIT int detour_dispatch(uint64_t site, arch::PtRegs* r) {
  auto* s = reinterpret_cast<ProbeSite*>(site);
  const ReadSide rs = read_lock();
  const ProbeList* l = s->list.load(std::memory_order_seq_cst);
  const uint64_t flags = r->eflags;
  bool skip = false;
  if (l && l->n) {
    if (t_depth) {
      count_misses(l);
    } else {
      ++t_depth;
      UTRAMP_XSTATE_BUF(xbuf, l->pre_needs_xstate);
      skip = run_pre(l, r, xbuf);
      --t_depth;
    }
  }
  r->eflags = (flags & ~arch::kUserFlags) | (r->eflags & arch::kUserFlags);
  read_unlock(rs);
  return skip ? 1 : 0;
}

}  // namespace utramp::probe
