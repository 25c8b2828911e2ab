// The probe manager: sites, their probes, and the desired state of every probed address
// (nothing, an int3, or a jump to a detour) turned into patch batches.
//
// Change protocol (attach, detach, optimisation switch), under the manager's lock:
//   1. prepare: analyse each new address and build its permanent ProbeSite (slot
//      written, trap addresses in the hit table) before anything can reach it;
//   2. decide the desired state of every site whose probes change and of the sites just
//      before them (whose 5-byte windows may cover them);
//   3. publish the new probe lists and arm new sites;
//   4. one patch batch (patch::apply: expected bytes checked, int3 first, W^X kept) for
//      every byte region whose state changes; a thread trapping on a region meanwhile
//      is sent through the detour its old or new state uses, or to our SIGTRAP hook;
//   5. on failure, put the old lists back: nothing changed.
// Detach then waits for an SRCU grace period (outside the lock) before freeing the
// probes and lists it unpublished: when it returns, no handler of them runs.
#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>
#include <map>

#include <memory>
#include <mutex>
#include <set>
#include <unordered_set>

#include "arch/arch.hpp"
#include "arch/probe.hpp"
#include "common/hex.hpp"
#include "os/c_runtime.hpp"
#include "os/exec_memory.hpp"
#include "os/text_writer.hpp"
#include "patch/patcher.hpp"
#include "probe/analysis.hpp"
#include "probe/hit.hpp"
#include "probe/probe.hpp"
#include "probe/sigtrap_mask.hpp"
#include "sites/table.hpp"
#include "tramp/trampoline.hpp"

namespace utramp::probe {

std::string_view state_name(State s) noexcept {
  return s == State::optimised ? "optimised" : "int3";
}

namespace {

// Where code for `addr` may go: within rel32 reach of it (the jump back) and of every
// address its relocated instructions name (RIP-relative operands, branch targets).
arch::Window reach(uint64_t addr, std::span<const uint64_t> targets) {
  arch::Window w = arch::rel32_window(addr);
  for (uint64_t t : targets) {
    const arch::Window v = arch::rel32_window(t);
    w.lo = std::max(w.lo, v.lo);
    w.hi = std::min(w.hi, v.hi);
  }
  if (w.lo >= w.hi) w = arch::rel32_window(addr);  // unreachable: relocation will say so
  return w;
}

enum class SiteState : uint8_t { idle, int3, optimised };

// The longest footprint a site can have: a jump window (whole instructions from A
// covering 5 bytes: at most 4 + 15).
constexpr size_t kMaxFootprint = arch::kSiteLen - 1 + arch::kMaxInsnLen;

struct SiteRec {
  ProbeSite* site = nullptr;  // permanent
  Function func;
  std::string label;
  uint8_t len = 0;
  std::vector<uint8_t> orig;  // bytes as compiled from addr (at least the window)
  // The jump window, planned on first need.
  bool window_planned = false;
  bool window_ok = false;
  arch::JumpWindow window;
  std::string window_why;
  std::string multi_why;      // "" when a multi-instruction window is provably safe
  uint64_t detour = 0;
  std::string detour_why;
  std::vector<Probe*> probes;  // attach order
  SiteState applied = SiteState::idle;
  std::string not_optimised;
  uint64_t addr() const { return site->addr; }
};

ProbeList* make_list(const std::vector<Probe*>& v) {
  if (v.empty()) return nullptr;
  void* mem = ::operator new(sizeof(ProbeList) + (v.size() - 1) * sizeof(Probe*));
  auto* l = new (mem) ProbeList;
  l->n = static_cast<uint32_t>(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    Probe* p = v[i];
    l->items[i] = p;
    if (p->kind == ProbeKind::probe && p->post) l->any_post = true;
    if (p->pre && !p->pre_gprs_only) l->pre_needs_xstate = true;
    if (p->kind == ProbeKind::probe && p->post && !p->post_gprs_only) l->post_needs_xstate = true;
  }
  return l;
}

void free_list(ProbeList* l) {
  if (!l) return;
  l->~ProbeList();
  ::operator delete(l);
}

}  // namespace

struct Manager::Impl {
  std::mutex mu;
  std::mutex sync_mu;  // one grace period at a time
  Analysis an{[this](uint64_t a, std::span<uint8_t> b) { overlay_originals(a, b); }};
  std::map<uint64_t, std::unique_ptr<SiteRec>> sites;
  std::unordered_set<Probe*> live;
  uint64_t next_id = 1;
  bool optimize = true;
  std::vector<ProbeList*> retired_lists;
  std::vector<Probe*> retired_probes;
  std::vector<bool> rp_used = std::vector<bool>(kMaxRetprobes, false);

  // The footprint a state occupies: [addr, addr+n).
  static size_t footprint(const SiteRec& r, SiteState s) {
    switch (s) {
      case SiteState::idle: return 0;
      case SiteState::int3: return arch::kTrapLen;
      case SiteState::optimised: return r.window.len;
    }
    return 0;
  }

  // Originals over our own applied footprints.
  void overlay_originals(uint64_t addr, std::span<uint8_t> bytes) {
    const uint64_t end = addr + bytes.size();
    for (auto it = sites.lower_bound(addr > kMaxFootprint ? addr - kMaxFootprint : 0);
         it != sites.end() && it->first < end; ++it) {
      const SiteRec& r = *it->second;
      const size_t n = footprint(r, r.applied);
      for (size_t k = 0; k < n && k < r.orig.size(); ++k) {
        const uint64_t a = r.addr() + k;
        if (a >= addr && a < end) bytes[a - addr] = r.orig[k];
      }
    }
  }

  Result<SiteRec*> prepare(uint64_t addr);
  void plan_window(SiteRec& r);
  Result<void> ensure_detour(SiteRec& r);

  // The new probe vector of each changed site.
  using Changes = std::map<SiteRec*, std::vector<Probe*>>;
  Result<void> commit(const Changes& changes);

  Result<void> prepare_probe(Probe* p, std::span<const uint64_t> handler_calls);
  void retire_and_maybe_sync(std::unique_lock<std::mutex>& lock, bool force);
};

Manager& Manager::instance() {
  static Manager* m = new Manager();  // never destroyed: sites outlive statics
  return *m;
}

// Made when a shared copy of the runtime loads (managers_early.cpp), on first use in the
// CLI (which attaches nothing in its own process).
Manager::Manager() : impl_(new Impl) {
  Impl* impl = impl_;
  static Impl* g_impl = impl;
  // A fork while another thread holds the lock would leave it held forever in the
  // child: take it across fork(). Our lock is taken before the site table's, the
  // patcher's and the arena's (commit holds it while calling them), so it must be taken
  // first at fork too: prepare handlers run last-registered first, and the trampoline
  // manager's handler (which takes those lower locks) registers when it is created:
  // create it before registering ours.
  // sync_mu is held without mu while a thread waits for a grace period: in the child,
  // where that thread does not exist, it starts afresh.
  (void)tramp::Manager::instance();
  pthread_atfork([] { g_impl->mu.lock(); }, [] { g_impl->mu.unlock(); },
                 [] {
                   g_impl->mu.unlock();
                   new (&g_impl->sync_mu) std::mutex();
                 });
}

Result<SiteRec*> Manager::Impl::prepare(uint64_t addr) {
  if (auto it = sites.find(addr); it != sites.end()) {
    SiteRec& r = *it->second;
    // The same code as when the site was made (an object unloaded and another loaded at
    // the same address would not be): reuse its slot and detour.
    std::vector<uint8_t> now(reinterpret_cast<const uint8_t*>(addr),
                             reinterpret_cast<const uint8_t*>(addr) + r.len);
    overlay_originals(addr, now);
    if (std::equal(now.begin(), now.end(), r.orig.begin())) return &r;
    if (!r.probes.empty())
      return make_error(Errc::busy, fmt::format("{} ({:#x}): the code changed under attached probes",
                                                r.label, addr));
    sites.erase(it);  // its ProbeSite stays (permanent); the hit table gets the new one
  }
  UTRAMP_TRY(an.check_address(addr));
  auto f = an.function_at(addr);
  if (!f) return std::move(f).error();
  UTRAMP_TRY(an.check_function(*f, addr));
  auto len = an.boundary(*f, addr);
  if (!len) return std::move(len).error();
  const std::vector<uint8_t> code = an.code(*f, addr);
  UTRAMP_TRY(an.check_unchanged(*f, addr, *len));
  const std::string label = an.label(addr);
  auto ool = arch::plan_out_of_line(std::span(code).first(*len), addr);
  if (!ool) return make_error(ool.error().code, fmt::format("{}: {}", label, ool.error().message));

  auto rec = std::make_unique<SiteRec>();
  auto* site = new ProbeSite();  // permanent: see hit.hpp
  site->addr = addr;
  site->len = static_cast<uint8_t>(*len);
  site->ool = *ool;
  if (ool->kind == arch::OutOfLine::Kind::slot) {
    std::vector<uint64_t> targets;
    if (ool->insn.rip_relative) targets.push_back(ool->insn.target);
    const auto w = reach(addr, targets);
    auto block = os::ExecArena::instance().allocate(arch::kSlotSizeBound, w.lo, w.hi);
    auto fail = [&](const Error& e) -> Error {
      if (block) os::ExecArena::instance().free(*block);
      delete site;
      return make_error(e.code, fmt::format("{}: out-of-line slot: {}", label, e.message));
    };
    if (!block) return fail(block.error());
    auto slot = arch::emit_slot(std::span(code).first(*len), addr, block->addr);
    if (!slot) return fail(slot.error());
    if (auto r = os::ExecArena::instance().write(*block, 0, slot->code); !r) return fail(r.error());
    site->slot = block->addr;
    site->slot_post = block->addr + slot->post_entry;
    site->post_trap = block->addr + slot->post_trap;
    if (!hit_table_insert(site->post_trap, TrapKind::post, site))
      return fail(make_error(Errc::no_memory, "the probe trap table is full"));
  }
  if (!hit_table_insert(addr, TrapKind::site, site)) {
    // The slot (if any) stays allocated: its int3 is already in the table.
    return make_error(Errc::no_memory, fmt::format("{}: the probe trap table is full", label));
  }
  rec->site = site;
  rec->func = *f;
  rec->label = label;
  rec->len = static_cast<uint8_t>(*len);
  rec->orig.assign(code.begin(), code.begin() + std::min(code.size(), kMaxFootprint));
  SiteRec* out = rec.get();
  sites.emplace(addr, std::move(rec));
  return out;
}

void Manager::Impl::plan_window(SiteRec& r) {
  if (r.window_planned) return;
  r.window_planned = true;
  const std::vector<uint8_t> code = an.code(r.func, r.addr());
  auto w = arch::plan_jump_window(code, r.addr());
  if (!w) {
    r.window_why = w.error().message;
    return;
  }
  if (auto u = an.check_unchanged(r.func, r.addr(), w->len); !u) {
    r.window_why = u.error().message;
    return;
  }
  if (w->offsets.size() > 1)
    if (auto m = an.check_multi_window(r.func, r.addr(), w->len); !m) r.multi_why = m.error().message;
  r.window = std::move(*w);
  r.window_ok = true;
}

Result<void> Manager::Impl::ensure_detour(SiteRec& r) {
  if (r.detour) return {};
  if (!r.detour_why.empty()) return make_error(Errc::no_memory, r.detour_why);
  arch::DetourSpec spec;
  spec.addr = r.addr();
  spec.window = r.window;
  spec.site = reinterpret_cast<uint64_t>(r.site);
  spec.dispatch = reinterpret_cast<uint64_t>(&detour_dispatch);
  spec.redirect_trap = arch::redirect_trap();
  const auto w = reach(r.addr(), r.window.targets);
  auto block = os::ExecArena::instance().allocate(arch::detour_size_bound(spec), w.lo, w.hi);
  auto fail = [&](const Error& e) -> Error {
    if (block) os::ExecArena::instance().free(*block);
    r.detour_why = fmt::format("detour: {}", e.message);
    return make_error(e.code, r.detour_why);
  };
  if (!block) return fail(block.error());
  auto code = arch::emit_detour(spec, block->addr);
  if (!code) return fail(code.error());
  if (auto wr = os::ExecArena::instance().write(*block, 0, *code); !wr) return fail(wr.error());
  r.detour = block->addr;  // permanent, like the slot
  return {};
}

Result<void> Manager::Impl::commit(const Changes& changes) {
  auto probes_of = [&](SiteRec* r) -> const std::vector<Probe*>& {
    auto it = changes.find(r);
    return it != changes.end() ? it->second : r->probes;
  };
  // Sites to decide: the changed ones and those just before them.
  std::set<SiteRec*> affected;
  for (auto& [r, v] : changes) {
    affected.insert(r);
    const uint64_t a = r->addr();
    for (auto it = sites.lower_bound(a > kMaxFootprint ? a - kMaxFootprint : 0);
         it != sites.end() && it->first < a; ++it)
      if (!probes_of(it->second.get()).empty()) affected.insert(it->second.get());
  }

  int quiescent = -1;  // one thread only: read lazily
  std::map<SiteRec*, SiteState> desired;
  std::map<SiteRec*, std::string> why;
  for (SiteRec* r : affected) {
    const auto& v = probes_of(r);
    SiteState d = v.empty() ? SiteState::idle : SiteState::int3;
    std::string reason;
    if (d != SiteState::idle) {
      const bool post = std::any_of(v.begin(), v.end(), [](const Probe* p) {
        return p->kind == ProbeKind::probe && p->post;
      });
      const bool keep = std::any_of(v.begin(), v.end(), [](const Probe* p) { return p->keep_int3; });
      if (!optimize) {
        reason = "optimisation is off";
      } else if (keep) {
        reason = "a probe here asked to stay an int3";
      } else if (post) {
        reason = "a probe here has a post-handler, which runs on a trap after the instruction";
      } else {
        plan_window(*r);
        if (!r->window_ok) reason = r->window_why;
        for (auto it = sites.upper_bound(r->addr());
             reason.empty() && it != sites.end() && it->first < r->addr() + r->window.len; ++it)
          if (!probes_of(it->second.get()).empty())
            reason = fmt::format("the probe at {} lies inside the {} bytes a jump would replace",
                                 it->second->label, r->window.len);
        if (reason.empty() && r->window.offsets.size() > 1) {
          if (!r->multi_why.empty()) {
            reason = r->multi_why;
          } else {
            if (quiescent < 0) {
              auto n = os::thread_count();
              quiescent = n && *n == 1 ? 1 : 0;
            }
            if (!quiescent)
              reason = fmt::format("the jump would replace {} instructions and other threads "
                                   "run (one could be stopped between them)",
                                   r->window.offsets.size());
          }
        }
        if (reason.empty())
          if (auto det = ensure_detour(*r); !det) reason = det.error().message;
        if (reason.empty()) d = SiteState::optimised;
      }
    }
    desired[r] = d;
    why[r] = reason;
  }

  // A probe in the C library while other threads run: its batch's int3 (or the int3 it
  // stays) would end the process if a thread that glibc runs with every signal blocked
  // (a thread's start or end, a posix_spawn or vfork child) reached it
  // (os::c_runtime_object). Refused, nothing changed.
  for (SiteRec* r : affected) {
    if (desired[r] == SiteState::idle || r->applied != SiteState::idle || !os::c_runtime_object(r->func.object))
      continue;
    if (const std::string why = os::c_runtime_change_refused(r->func.object); !why.empty())
      return make_error(Errc::busy, fmt::format("{} ({:#x}): no probe in {}; probe it from start-up (utramp "
                                                "run OBJECT -- PROGRAM)",
                                                r->label, r->addr(), why));
    break;  // one thread count for the whole batch
  }

  // A site about to become an int3 while a thread keeps SIGTRAP blocked where the agent
  // cannot see it (the raw system call): that thread reaching it would not get a signal,
  // the kernel would end the process. Refused, nothing changed, naming the thread
  // (probe/sigtrap_mask.hpp; docs/sites.md, "A thread that blocks SIGTRAP unseen"). The
  // masks are read only when there is such a site; a look takes /proc reads, no lock of
  // ours and nothing that loads code.
  for (SiteRec* r : affected) {
    if (desired[r] != SiteState::int3 || r->applied == SiteState::int3) continue;
    auto blocking = threads_keeping_sigtrap_blocked();
    if (blocking && !blocking->empty())
      return make_error(Errc::busy,
                        fmt::format("{} ({:#x}) would be an int3 ({}), and {} keep{} SIGTRAP blocked: a "
                                    "thread that reached it would not be handed the trap, the kernel "
                                    "would end the process",
                                    r->label, r->addr(), why[r].empty() ? "no jump fits" : why[r],
                                    describe(*blocking), blocking->size() == 1 ? "s" : ""));
    break;  // one look for the whole batch
  }

  // Publish the new lists (and arm new sites) before any byte changes.
  std::map<SiteRec*, ProbeList*> old_lists;
  for (auto& [r, v] : changes) {
    if (desired[r] != SiteState::idle) r->site->armed.store(true, std::memory_order_seq_cst);
    if (v == r->probes && r->site->list.load()) continue;  // same probes (an optimisation switch)
    old_lists[r] = r->site->list.exchange(make_list(v), std::memory_order_seq_cst);
  }
  auto unpublish = [&] {
    for (auto& [r, old] : old_lists) {
      // A reader may have seen the new list already: it goes after a grace period.
      if (ProbeList* l = r->site->list.exchange(old, std::memory_order_seq_cst)) retired_lists.push_back(l);
      if (r->applied == SiteState::idle) r->site->armed.store(false, std::memory_order_seq_cst);
    }
  };

  // Byte regions whose state changes: the union of old and new footprints, merged
  // where they overlap (the patcher takes no overlapping ops).
  struct Span {
    uint64_t lo, hi;
  };
  std::vector<Span> spans;
  for (SiteRec* r : affected) {
    const SiteState d = desired[r];
    if (d == r->applied) continue;
    const size_t n = std::max(footprint(*r, r->applied), footprint(*r, d));
    spans.push_back({r->addr(), r->addr() + n});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.lo < b.lo; });
  std::vector<Span> regions;
  for (const Span& s : spans) {
    if (!regions.empty() && s.lo < regions.back().hi) regions.back().hi = std::max(regions.back().hi, s.hi);
    else regions.push_back(s);
  }
  auto state_after = [&](SiteRec* r) {
    auto it = desired.find(r);
    return it != desired.end() ? it->second : r->applied;
  };
  std::vector<patch::PatchOp> ops;
  for (const Span& g : regions) {
    // Code unloaded since (dlclose) has nothing to restore, and must not be read; a probe
    // cannot be placed there (prepare checked the mapping).
    if (!an.executable(g.lo, g.hi - g.lo)) continue;
    patch::PatchOp op;
    op.addr = g.lo;
    op.expected.assign(reinterpret_cast<const uint8_t*>(g.lo), reinterpret_cast<const uint8_t*>(g.hi));
    std::vector<uint8_t> image(op.expected.begin(), op.expected.end());
    overlay_originals(g.lo, image);
    for (auto it = sites.lower_bound(g.lo > kMaxFootprint ? g.lo - kMaxFootprint : 0);
         it != sites.end() && it->first < g.hi; ++it) {
      SiteRec& r = *it->second;
      const SiteState s = state_after(&r);
      std::vector<uint8_t> fp;
      if (s == SiteState::int3) {
        fp.assign(1, arch::kTrapByte);
      } else if (s == SiteState::optimised) {
        auto j = arch::encode_jmp(r.addr(), r.detour);
        if (!j) {
          unpublish();
          return std::move(j).error();
        }
        fp.assign(j->begin(), j->end());
        fp.resize(r.window.len, arch::kTrapByte);  // the rest of the window: never executed
        std::copy(r.orig.begin() + arch::kSiteLen, r.orig.begin() + r.window.len, fp.begin() + arch::kSiteLen);
      }
      for (size_t k = 0; k < fp.size(); ++k) {
        const uint64_t a = r.addr() + k;
        if (a >= g.lo && a < g.hi) image[a - g.lo] = fp[k];
      }
    }
    if (image == op.expected) continue;
    op.replacement = std::move(image);
    SiteRec& head = *sites.at(g.lo);
    // A thread trapping on the region's first byte mid-batch: through the detour the old
    // or the new state uses (the bytes after byte 0 may be half-written), else to our
    // SIGTRAP hook, which runs the int3 probe (the site is armed) or restarts.
    if (head.applied == SiteState::optimised || state_after(&head) == SiteState::optimised)
      op.emulate = patch::Emulation::jump_to(head.detour);
    op.label = head.label;
    ops.push_back(std::move(op));
  }
  if (!ops.empty()) {
    if (auto r = patch::apply(ops); !r) {
      unpublish();
      return std::move(r).error();
    }
  }
  for (SiteRec* r : affected) {
    r->applied = desired[r];
    r->not_optimised = r->applied == SiteState::optimised ? "" : why[r];
    // Disarmed only now that the original bytes are back on every core: pairs with the
    // hook reading `armed` before the byte (hit.cpp, trap_hook).
    if (r->applied == SiteState::idle) r->site->armed.store(false, std::memory_order_seq_cst);
  }
  for (auto& [r, v] : changes) r->probes = v;
  for (auto& [r, old] : old_lists)
    if (old) retired_lists.push_back(old);
  return {};
}

Result<void> Manager::Impl::prepare_probe(Probe* p, std::span<const uint64_t> handler_calls) {
  p->pre_gprs_only = p->pre && an.gprs_only(reinterpret_cast<uint64_t>(p->pre), handler_calls);
  p->post_gprs_only = p->post && an.gprs_only(reinterpret_cast<uint64_t>(p->post), handler_calls);
  return {};
}

// Frees what was retired before a grace period, when asked or when enough piled up.
// Called with the lock held; waits without it.
void Manager::Impl::retire_and_maybe_sync(std::unique_lock<std::mutex>& lock, bool force) {
  if (!force && retired_lists.size() + retired_probes.size() < 256) return;
  std::vector<ProbeList*> lists = std::move(retired_lists);
  std::vector<Probe*> probes = std::move(retired_probes);
  retired_lists.clear();
  retired_probes.clear();
  lock.unlock();
  {
    std::lock_guard s(sync_mu);
    srcu_synchronize();
  }
  for (ProbeList* l : lists) free_list(l);
  for (Probe* p : probes) delete p;
  lock.lock();
}

Result<Probe*> Manager::attach(const ProbeSpec& spec) {
  auto r = attach_batch(std::span(&spec, 1));
  if (!r) return std::move(r).error();
  return r->front();
}

Result<std::vector<Probe*>> Manager::attach_batch(std::span<const ProbeSpec> specs) {
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  install_hit_path();
  UTRAMP_TRY(m.an.refresh_maps());
  Impl::Changes changes;
  std::vector<std::unique_ptr<Probe>> made;
  for (const ProbeSpec& s : specs) {
    if (!s.pre && !s.post)
      return make_error(Errc::invalid_argument,
                        fmt::format("probe at {:#x}: no handler (pre and post are both NULL)", s.addr));
    auto rec = m.prepare(s.addr);
    if (!rec) return std::move(rec).error();
    auto p = std::make_unique<Probe>();
    p->kind = ProbeKind::probe;
    p->site = (*rec)->site;
    p->pre = s.pre;
    p->post = s.post;
    p->cookie = s.cookie;
    p->keep_int3 = s.keep_int3;
    p->count_hits = s.count_hits;
    UTRAMP_TRY(m.prepare_probe(p.get(), s.handler_calls));
    auto [it, fresh] = changes.try_emplace(*rec, (*rec)->probes);
    it->second.push_back(p.get());
    made.push_back(std::move(p));
  }
  if (auto r = m.commit(changes); !r) {
    for (auto& p : made) m.retired_probes.push_back(p.release());  // may have been seen
    return std::move(r).error();
  }
  std::vector<Probe*> out;
  for (auto& p : made) {
    p->id = m.next_id++;
    m.live.insert(p.get());
    out.push_back(p.release());
  }
  m.retire_and_maybe_sync(lock, false);
  return out;
}

Result<uint64_t> Manager::resolve(const std::string& symbol, uint64_t offset) {
  auto& table = sites::SiteTable::instance();
  sites::Site* s = table.find_name(symbol);
  if (!s) {
    UTRAMP_TRY(table.discover());
    s = table.find_name(symbol);
  }
  if (!s) return make_error(Errc::not_found, fmt::format("no function named '{}'", symbol));
  if (s->info.size && offset >= s->info.size)
    return make_error(Errc::out_of_range,
                      fmt::format("{}+{:#x} is past the function's end ({} bytes)", symbol, offset,
                                  s->info.size));
  return s->info.func + offset;
}

Result<Probe*> Manager::attach_retprobe(const RetprobeSpec& spec) {
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  install_hit_path();
  UTRAMP_TRY(m.an.refresh_maps());
  if (!spec.entry && !spec.ret)
    return make_error(Errc::invalid_argument,
                      fmt::format("return probe on {:#x}: no handler (entry and ret are both NULL)",
                                  spec.func));
  if (spec.maxactive > static_cast<int>(kRetDepth))
    return make_error(Errc::out_of_range,
                      fmt::format("return probe on {:#x}: maxactive {} is over the per-thread "
                                  "return stack of {}",
                                  spec.func, spec.maxactive, kRetDepth));
  UTRAMP_TRY(m.an.check_address(spec.func));
  auto f = m.an.function_at(spec.func);
  if (!f) return std::move(f).error();
  if (f->start != spec.func)
    return make_error(Errc::invalid_argument,
                      fmt::format("return probe: {:#x} is {}+{:#x}, not a function's entry",
                                  spec.func, f->name, spec.func - f->start));
  auto rec = m.prepare(spec.func);
  if (!rec) return std::move(rec).error();
  auto slot = std::find(m.rp_used.begin(), m.rp_used.end(), false);
  if (slot == m.rp_used.end())
    return make_error(Errc::busy, fmt::format("all {} return probe slots are in use", kMaxRetprobes));
  const auto idx = static_cast<uint32_t>(slot - m.rp_used.begin());
  auto p = std::make_unique<Probe>();
  p->kind = ProbeKind::retprobe;
  p->site = (*rec)->site;
  p->pre = spec.entry;
  p->post = spec.ret;
  p->cookie = spec.cookie;
  p->maxactive = spec.maxactive > 0 ? static_cast<uint32_t>(spec.maxactive) : kDefaultMaxactive;
  p->rp_slot = idx;
  p->keep_int3 = spec.keep_int3;
  UTRAMP_TRY(m.prepare_probe(p.get(), spec.handler_calls));
  // The slot names the probe before any entry can record an instance of it.
  RetprobeSlot& rs = retprobe_slots()[idx];
  p->rp_gen = rs.gen.load() + 1;
  rs.probe.store(p.get(), std::memory_order_seq_cst);
  rs.gen.store(p->rp_gen, std::memory_order_seq_cst);
  Impl::Changes changes;
  changes[*rec] = (*rec)->probes;
  changes[*rec].push_back(p.get());
  if (auto r = m.commit(changes); !r) {
    rs.gen.store(p->rp_gen + 1, std::memory_order_seq_cst);
    rs.probe.store(nullptr, std::memory_order_seq_cst);
    // The generation moved on; the probe may have been read: free it after a grace.
    m.retired_probes.push_back(p.release());
    return std::move(r).error();
  }
  m.rp_used[idx] = true;
  p->id = m.next_id++;
  m.live.insert(p.get());
  Probe* out = p.release();
  m.retire_and_maybe_sync(lock, false);
  return out;
}

Result<void> Manager::detach(Probe* probe) { return detach_batch(std::span(&probe, 1)); }

Result<void> Manager::detach_batch(std::span<Probe* const> probes) {
  Impl& m = *impl_;
  if (in_probe_handler())
    return make_error(Errc::busy, "detach from inside a probe handler would wait for itself");
  std::unique_lock lock(m.mu);
  std::unordered_set<Probe*> gone;
  for (Probe* p : probes) {
    if (!p || !m.live.count(p) || !gone.insert(p).second)
      return make_error(Errc::not_found, "detach: not an attached probe (already detached?)");
  }
  Impl::Changes changes;
  for (Probe* p : probes) {
    SiteRec* rec = m.sites.at(p->site->addr).get();
    auto [it, fresh] = changes.try_emplace(rec, rec->probes);
    std::erase(it->second, p);
  }
  // Return probes first stop recognising their instances: those in flight return
  // through the trampoline without a handler.
  for (Probe* p : probes)
    if (p->kind == ProbeKind::retprobe) {
      RetprobeSlot& rs = retprobe_slots()[p->rp_slot];
      rs.gen.store(p->rp_gen + 1, std::memory_order_seq_cst);
      rs.probe.store(nullptr, std::memory_order_seq_cst);
    }
  if (auto r = m.commit(changes); !r) {
    for (Probe* p : probes)
      if (p->kind == ProbeKind::retprobe) {
        RetprobeSlot& rs = retprobe_slots()[p->rp_slot];
        rs.probe.store(p, std::memory_order_seq_cst);
        rs.gen.store(p->rp_gen, std::memory_order_seq_cst);
      }
    return std::move(r).error();
  }
  for (Probe* p : probes) {
    m.live.erase(p);
    if (p->kind == ProbeKind::retprobe) m.rp_used[p->rp_slot] = false;  // reused with a new gen
    m.retired_probes.push_back(p);
  }
  m.retire_and_maybe_sync(lock, true);
  return {};
}

Result<State> Manager::check(uint64_t addr) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  UTRAMP_TRY(m.an.refresh_maps());
  auto rec = m.prepare(addr);
  if (!rec) return std::move(rec).error();
  SiteRec& r = **rec;
  if (!m.optimize) return State::int3;
  m.plan_window(r);
  if (!r.window_ok || !r.multi_why.empty()) return State::int3;
  for (auto it = m.sites.upper_bound(addr); it != m.sites.end() && it->first < addr + r.window.len; ++it)
    if (!it->second->probes.empty()) return State::int3;
  if (r.window.offsets.size() > 1) {
    auto n = os::thread_count();
    if (!n || *n != 1) return State::int3;
  }
  return State::optimised;
}

std::vector<ProbeInfo> Manager::list() {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  std::vector<ProbeInfo> out;
  for (auto& [addr, rec] : m.sites) {
    for (Probe* p : rec->probes) {
      ProbeInfo i;
      i.id = p->id;
      i.retprobe = p->kind == ProbeKind::retprobe;
      i.addr = addr;
      i.symbol = rec->label;
      i.object = rec->func.object;
      i.state = rec->applied == SiteState::optimised ? State::optimised : State::int3;
      i.not_optimised = rec->not_optimised;
      i.pre = p->pre != nullptr;
      i.post = p->post != nullptr;
      i.pre_gprs_only = p->pre_gprs_only;
      i.post_gprs_only = p->post_gprs_only;
      i.hits = p->hits.load();
      i.misses = p->misses.load();
      i.maxactive = static_cast<int>(p->maxactive);
      i.cookie = p->cookie;
      out.push_back(std::move(i));
    }
  }
  return out;
}

Result<void> Manager::set_optimization(bool on) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  if (m.optimize == on) return {};
  m.optimize = on;
  Impl::Changes changes;
  for (auto& [addr, rec] : m.sites)
    if (!rec->probes.empty()) changes[rec.get()] = rec->probes;
  if (auto r = m.commit(changes); !r) {
    m.optimize = !on;
    return r;
  }
  return {};
}

bool Manager::optimization() const {
  std::lock_guard lock(impl_->mu);
  return impl_->optimize;
}

std::string format_listing(const std::vector<ProbeInfo>& probes) {
  std::string out = fmt::format("{:<18} {:<40} {:<10} {:>12} {:>10}\n", "ADDRESS", "SYMBOL",
                                "STATE", "HITS", "MISSES");
  for (const ProbeInfo& p : probes) {
    std::string sym = p.symbol + (p.retprobe ? " (return)" : "");
    out += fmt::format("{:#018x} {:<40} {:<10} {:>12} {:>10}", p.addr, sym, state_name(p.state),
                       p.hits, p.misses);
    if (!p.not_optimised.empty()) out += fmt::format("  # {}", p.not_optimised);
    out += '\n';
  }
  return out;
}

}  // namespace utramp::probe
