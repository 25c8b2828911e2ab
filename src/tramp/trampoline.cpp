#include "tramp/trampoline.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <unwind.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <unordered_set>

#include "arch/arch.hpp"
#include "arch/image.hpp"
#include "arch/jit_debug.hpp"
#include "os/dwarf.hpp"
#include "os/exec_memory.hpp"
#include "os/perf_map.hpp"
#include "os/text_writer.hpp"
#include "patch/patcher.hpp"
#include "sites/table.hpp"
#include "tramp/threads.hpp"

namespace utramp::tramp {

using abi::Part;
using abi::RetType;
using abi::Signature;

std::string_view attach_type_name(AttachType t) noexcept {
  switch (t) {
    case AttachType::fentry: return "fentry";
    case AttachType::fexit: return "fexit";
    case AttachType::fmod_ret: return "fmod_ret";
    case AttachType::freplace: return "freplace";
    case AttachType::tracer: return "tracer";
  }
  return "?";
}

// Where an image calls one link's program: `call rel32` (near), or, for a program out
// of rel32 reach, `mov r11, imm64` of its address followed by `call r11` (far; `at` is
// the mov, `resume` the instruction after the call). `bytes` are the instruction at `at`
// as emitted: what disabling the call expects to find there.
struct ProgCall {
  uint64_t link_id = 0;
  uint64_t at = 0;
  uint64_t resume = 0;
  bool far = false;
  bool disabled = false;
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> skip;  // what replaces `bytes` while disabled (empty: not made yet)
  uint64_t skip_to = 0;       // where the disabled call goes (J, or its T)
};

// A generated image, immutable but for its program calls, which detach may disable
// (Manager::disable_calls). `slot` is its own counter (images that call the original),
// `site_slot` the counter of the stub that leads to it.
struct Manager::Image {
  os::ExecBlock block;
  bool calls_original = false;
  uint32_t slot = UINT32_MAX;
  uint32_t site_slot = 0;
  arch::DebugHandle* debug = nullptr;
  std::vector<ProgCall> calls;       // in the order the image runs its programs
  std::vector<os::ExecBlock> skips;  // where disabled calls go; freed with the image
};

struct Manager::Retired {
  std::unique_ptr<Image> image;
  uint64_t seq = 0;  // its place in retirement order (after_grace)
  // The threads that may still be inside the image (every registered thread at the
  // first reclamation attempt), each with how far it has been seen leaving: with its
  // site counter at zero (second), then with the image's own counter at zero (dropped).
  // Progress carries over between attempts, so busy threads need not all be outside at
  // the same instant.
  bool tracked = false;
  std::vector<std::pair<int, bool>> pending;  // tid, site counter seen at zero
};

struct Trampoline {
  sites::Site* site = nullptr;
  uint64_t func = 0;
  // Its function's name: the site's (sites are never freed), not a copy per trampoline;
  // the stub's and the image's names are made where they are needed (a diagnostic, a
  // registration), not kept (docs/benchmarks.md, "The agent's start-up heap").
  const std::string& name() const { return site->info.name; }
  Signature sig;
  os::ExecBlock stub_block;
  arch::StubCode stub;            // its offsets (the code, once written, is not kept)
  uint32_t site_slot = 0;
  uint64_t original = 0;          // where the image calls the body
  bool preserve_all = false;      // stub and images keep every register (arch/image.hpp)
  std::vector<Link*> links;       // in attach order
  std::unique_ptr<Manager::Image> image;
  uint64_t hop_target = 0;        // what the stub's hop jumps to now
  bool site_to_stub = false;      // the site jumps to the stub (else NOP or freplace)
  uint64_t hop() const { return stub_block.addr + stub.hop; }
  uint64_t pass() const { return stub_block.addr + stub.pass; }
};

namespace {

// Images by start address, for the unwind personality.
std::mutex g_images_mu;
std::mutex g_reclaim_mu;  // one reclamation attempt at a time
// Exit (docs/trampolines.md, "Detach at exit"): the handler Manager::instance() installs
// takes g_reclaim_mu for good and marks its thread. exit() then runs, on that thread,
// the handlers registered before it (when libutramp was dlopen'ed: the program's own
// atexit handlers, and _dl_fini with every ELF destructor); any of them may detach,
// which must not take the lock again. Images retired from then on are dropped once no
// thread can run them, never freed.
std::atomic<bool> g_exiting{false};
thread_local bool t_exit_holder __attribute__((tls_model("initial-exec"))) = false;

// g_reclaim_mu, unless this thread ran the exit handler and so holds it already.
class ReclaimLock {
 public:
  ReclaimLock() : take_(!t_exit_holder) {
    if (take_) g_reclaim_mu.lock();
  }
  ~ReclaimLock() {
    if (take_) g_reclaim_mu.unlock();
  }
  ReclaimLock(const ReclaimLock&) = delete;
  ReclaimLock& operator=(const ReclaimLock&) = delete;

 private:
  bool take_;
};
struct ImageRecord {
  uint32_t slot;    // the counter to release when unwinding through the image
  uint64_t end;
  uint64_t func;    // the traced function
  bool calls_original;
};
// By start address. Never destroyed: the reclaimer thread and unwinding threads may
// still use it while static destructors run at exit.
std::map<uint64_t, ImageRecord>& images() {
  static auto* m = new std::map<uint64_t, ImageRecord>();
  return *m;
}
std::atomic<void (*)(uint64_t)> g_unwind_hook{nullptr};

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

extern "C" uint64_t utramp_stats_begin() { return now_ns(); }
extern "C" void utramp_stats_end(uint64_t stats, uint64_t begin) {
  auto* s = reinterpret_cast<ProgStats*>(stats);
  s->run_cnt.fetch_add(1, std::memory_order_relaxed);
  s->run_ns.fetch_add(now_ns() - begin, std::memory_order_relaxed);
}

// Unwinding through an image (a C++ exception from the original function or from a
// program, or a forced unwind such as thread cancellation) skips the image's normal
// exit, which would have released this thread's counter: release it here.
extern "C" _Unwind_Reason_Code utramp_image_personality(int, _Unwind_Action actions,
                                                        _Unwind_Exception_Class,
                                                        _Unwind_Exception*, _Unwind_Context* ctx) {
  if (actions & _UA_CLEANUP_PHASE) {
    const uint64_t start = _Unwind_GetRegionStart(ctx);
    std::lock_guard lock(g_images_mu);
    auto it = images().find(start);
    if (it != images().end()) {
      uint32_t& c = this_thread_block().counters[it->second.slot];
      if (c) --c;
      // The traced function is being left by unwinding (an image that calls the
      // original is unwound through only when the original or its callees throw).
      if (it->second.calls_original)
        if (auto hook = g_unwind_hook.load(std::memory_order_acquire)) hook(it->second.func);
    }
  }
  return _URC_CONTINUE_UNWIND;
}

// "NAME stub": the label of a patch of T's stub, made only for a diagnostic
// (patch::PatchOp::describe).
std::string stub_label(const void* t) {
  return fmt::format("{} stub", static_cast<const Trampoline*>(t)->name());
}
// "utramp_image:NAME": T's images' name for debuggers and perf.
std::string image_name(const Trampoline& t) { return fmt::format("utramp_image:{}", t.name()); }

struct Patch {
  std::vector<patch::PatchOp> ops;
  // A jump of T's stub (its hop) retargeted.
  [[nodiscard]] Result<void> jmp(uint64_t at, uint64_t from_target, uint64_t to_target,
                                 const Trampoline* t) {
    auto a = arch::encode_jmp(at, from_target);
    if (!a) return std::move(a).error();
    auto b = arch::encode_jmp(at, to_target);
    if (!b) return std::move(b).error();
    patch::PatchOp op{at, {a->begin(), a->end()}, {b->begin(), b->end()},
                      patch::Emulation::jump_to(to_target)};
    op.describe = stub_label;
    op.of = t;
    ops.push_back(std::move(op));
    return {};
  }
};

}  // namespace

void set_unwind_hook(void (*hook)(uint64_t func)) {
  g_unwind_hook.store(hook, std::memory_order_release);
}

bool error_injectable(uint64_t func) {
  auto* s = sites::SiteTable::instance().find(func);
  return s && s->error_injectable;
}

Manager& Manager::instance() {
  static Manager* m = [] {
    auto* mgr = new Manager();  // never destroyed: images may outlive statics
    // fork() in a multithreaded program: take every lock of the machinery first (in
    // the order attach takes them), so the child inherits none held by a thread it
    // does not have; both sides release them after.
    pthread_atfork([] { Manager::instance().fork_prepare(); },
                   [] { Manager::instance().fork_release(); },
                   [] { Manager::instance().fork_release(); });
    // At exit the reclaimer must stop touching anything static destructors may be
    // tearing down (the unwinder's frame list, the allocator): wait for an attempt in
    // progress and keep the lock, so no further one starts. Images are left in place.
    // A detach later on this thread (an ELF destructor, say) reclaims without freeing
    // (ReclaimLock, reclaim_now).
    std::atexit([] {
      g_reclaim_mu.lock();
      t_exit_holder = true;
      g_exiting.store(true, std::memory_order_release);
    });
    return mgr;
  }();
  return *m;
}

void Manager::fork_prepare() {
  mu_.lock();
  if (!t_exit_holder) g_reclaim_mu.lock();  // (held already by a fork during exit)
  retired_mu_.lock();
  sites::SiteTable::instance().fork_lock();
  patch::fork_lock();
  os::ExecArena::instance().fork_lock();
  os::text_fork_lock();
  g_images_mu.lock();
}

void Manager::fork_release() {
  g_images_mu.unlock();
  os::text_fork_unlock();
  os::ExecArena::instance().fork_unlock();
  patch::fork_unlock();
  sites::SiteTable::instance().fork_unlock();
  retired_mu_.unlock();
  if (!t_exit_holder) g_reclaim_mu.unlock();
  mu_.unlock();
}

Result<Trampoline*> Manager::trampoline_for(uint64_t func, const AttachOptions& opts, MadeStubs& made) {
  // By the function's address or its site's (a map of both: a linear search made
  // attaching to every function of a program quadratic).
  if (auto it = tramp_at_.find(func); it != tramp_at_.end() && !it->second->site->unloaded)
    return it->second;
    // (a trampoline of an unloaded object's function stays, unreachable: another object
    // may now be mapped at its address, with sites of its own)
  auto& table = sites::SiteTable::instance();
  if (!table.find(func)) {
    // First use, or an object loaded since: look again.
    UTRAMP_TRY(table.discover());
    auto c = table.canonicalize(sites::Quiescence::live);
    if (!c) return std::move(c).error();
  }
  auto site = table.resolve(func);
  if (!site) return std::move(site).error();
  sites::Site* s = *site;
  std::string why;
  if (!s->usable(&why)) return make_error(Errc::unsupported, why);
  if (s->info.func != func)
    return make_error(Errc::invalid_argument,
                      fmt::format("{:#x} is {}+{:#x}, not a function start", func, s->info.name,
                                  func - s->info.func));
  auto t = std::make_unique<Trampoline>();
  t->site = s;
  t->func = s->info.func;
  if (opts.signature) {
    t->sig = *opts.signature;
  } else if (auto d = os::signature_from_dwarf(s->object(), s->info.func - s->bias); d) {
    t->sig = std::move(*d);
  } else {
    // No debug info (or none that describes the real convention): the documented
    // fallback, with the reason kept for `utramp show`.
    t->sig = Signature::fallback();
    t->sig.source = fmt::format("default ({})", d.error().message);
  }
  auto slot = alloc_counter_slot();
  if (!slot) return std::move(slot).error();
  t->site_slot = *slot;

  // The stub: near the site (the site jumps to it with rel32).
  arch::StubSpec spec;
  spec.site = s->addr();
  spec.counter_slot = t->site_slot;
  const auto tl = tls_layout();
  spec.tls = {tl.block, tl.counters, tl.active};
  spec.register_fn = reinterpret_cast<uint64_t>(&utramp_register_thread);
  t->preserve_all = sites::ipa_ra_exposed(s->info.kind);
  spec.preserve_all = t->preserve_all;
  if (t->preserve_all) spec.xstate = arch::host_xstate();
  if (s->info.kind == sites::SiteKind::prologue) {
    const auto* p = reinterpret_cast<const uint8_t*>(s->addr());
    spec.prologue.assign(p, p + s->info.site_len);
  } else if (s->info.kind == sites::SiteKind::mcount) {
    // The stub undoes the frame set up before the call and runs that code again as its
    // prologue, resuming after the call (arch/image.hpp).
    const auto* f = reinterpret_cast<const uint8_t*>(s->info.func);
    auto undo = arch::frame_undo({f, s->addr() - s->info.func}, s->info.func);
    if (!undo) {
      free_counter_slot(t->site_slot);
      return make_error(undo.error().code, fmt::format("{}: {}", s->info.name, undo.error().message));
    }
    const uint64_t from = s->info.func + (s->info.endbr ? 4 : 0);
    spec.prologue.assign(reinterpret_cast<const uint8_t*>(from), reinterpret_cast<const uint8_t*>(s->addr()));
    spec.prologue_from = from;
    spec.resume = s->addr() + s->info.site_len;
    spec.undo_frame = true;
    spec.frame = std::move(*undo);
  } else {
    spec.original = s->addr() + arch::kSiteLen;
  }
  const auto w = arch::rel32_window(s->addr());
  // The stub's code depends only on the address it is emitted for: a block as large as
  // the largest stub made so far is allocated and the stub emitted there, once; one
  // that does not fit (the first, or a larger kind) is emitted again in a block of its
  // size. (Measuring each stub by emitting it at the window's start first made every
  // trampoline emit its stub twice.)
  static size_t guess = 0;  // under mu_
  auto block = os::ExecArena::instance().allocate(std::max<size_t>(guess, 64), w.lo, w.hi);
  if (!block) {
    free_counter_slot(t->site_slot);
    return std::move(block).error();
  }
  auto stub = arch::emit_stub(spec, block->addr);
  for (int again = 0; stub && stub->code.size() > block->size && again < 2; ++again) {
    const size_t need = stub->code.size() + 16;
    // The larger block first: freed first, the small one may have been its chunk's only
    // block, and the chunk would be unmapped only to be mapped again.
    auto larger = os::ExecArena::instance().allocate(need, w.lo, w.hi);
    os::ExecArena::instance().free(*block);
    block = std::move(larger);
    if (!block) {
      free_counter_slot(t->site_slot);
      return std::move(block).error();
    }
    stub = arch::emit_stub(spec, block->addr);
  }
  if (!stub || stub->code.size() > block->size) {
    os::ExecArena::instance().free(*block);
    free_counter_slot(t->site_slot);
    if (!stub)
      return make_error(stub.error().code, fmt::format("{}: {}", s->info.name, stub.error().message));
    return make_error(Errc::too_big, "stub grew");
  }
  guess = std::max(guess, stub->code.size());
  // Staged into its block as soon as it is made (kept on the heap for one write of the
  // batch's stubs through /proc/self/mem, a tracer's 1,000 stubs cost 222 KB): nothing
  // reaches it before its site is patched, after attach_many seals the batch.
  if (auto r = os::ExecArena::instance().stage(*block, 0, stub->code); !r) {
    os::ExecArena::instance().free(*block);
    free_counter_slot(t->site_slot);
    return std::move(r).error();
  }
  made.made.push_back({t.get(), s->prologue_ool});
  // Freed, not emptied: `code = {}` is the initializer-list assignment, which keeps the
  // capacity (the 222 KB above stayed on the heap that way).
  std::vector<uint8_t>().swap(stub->code);
  t->stub_block = *block;
  t->stub = std::move(*stub);
  t->original = t->stub.original ? block->addr + t->stub.original : s->addr() + arch::kSiteLen;
  t->hop_target = t->pass();
  if (s->info.kind == sites::SiteKind::prologue) s->prologue_ool = t->original;
  tramp_at_[t->func] = t.get();
  tramp_at_[t->site->addr()] = t.get();
  tramps_.push_back(std::move(t));
  return tramps_.back().get();
}

// A change of one trampoline, prepared (image built, sealed and registered) but not yet
// reachable: publish() makes a set of plans live with one patch batch per step.
struct Manager::Plan {
  Trampoline* t = nullptr;
  std::vector<Link*> links;
  std::unique_ptr<Image> img;
  std::vector<patch::PatchOp> hop_ops;  // retarget the stub's hop
  sites::SiteState site_state;          // what the site must become
  // A new image whose code is staged, not yet sealed (prepare's `staged`): its unwind
  // and debugger records, which read the code, are made by register_images() once the
  // batch is sealed.
  std::optional<arch::ImageFrame> unregistered;
};

namespace {

void drop_image(std::unique_ptr<Manager::Image>& img);

// Frees what an image holds once nothing can reach it or run in it: its code, the
// thunks its disabled calls go to, its unwind and debugger records, its counter.
void free_image(Manager::Image& img) {
  {
    std::lock_guard lock(g_images_mu);
    images().erase(img.block.addr);
  }
  arch::unregister_image(img.debug);
  os::ExecArena::instance().free(img.block);
  for (const os::ExecBlock& b : img.skips) os::ExecArena::instance().free(b);
  if (img.slot != UINT32_MAX) free_counter_slot(img.slot);
}

// movabs: REX, opcode, then the 8-byte immediate last.
constexpr uint8_t kMovImm64Len = 10;

// A program that does nothing: where detach sends an image's calls of a detached link's
// program (returning 0, as a missed program does: fmod_ret continues to the body).
uint64_t skipped_program(uint64_t*) { return 0; }

// The program call that `insn` ends, `prev` being the instruction before it: a `call
// rel32` (its own address), or an indirect call after an instruction whose last eight
// bytes are the target (the `mov r11, imm64`: the mov's address). Target 0: none.
struct CallSeen {
  uint64_t target = 0;
  const arch::Insn* at = nullptr;
};
CallSeen call_seen(const arch::Insn& insn, const std::optional<arch::Insn>& prev) {
  CallSeen c;
  if (insn.flow == arch::Flow::call && insn.relative_branch) {
    c.target = insn.target;
    c.at = &insn;
  } else if (insn.flow == arch::Flow::indirect_call && prev && prev->length == kMovImm64Len) {
    std::memcpy(&c.target, prev->bytes.data() + prev->length - 8, 8);
    c.at = &*prev;
  }
  return c;
}

ProgCall prog_call(uint64_t link_id, const arch::Insn& at, const arch::Insn& call) {
  ProgCall c;
  c.link_id = link_id;
  c.at = at.address;
  c.far = &at != &call;
  c.resume = call.address + call.length;
  c.bytes.assign(at.raw().begin(), at.raw().end());
  return c;
}

// Where the image of `code` at `base` calls each of `runs` (link id, program), which are
// in the order the image runs them (ImageSpec: fentry, fmod_ret, fexit; arch/image.hpp),
// found by decoding the whole image: a call to a program is `call rel32` to it, or an
// instruction whose last eight bytes are its address (the `mov r11, imm64`) followed by
// an indirect call. Every run must be found, in order: anything else is an image this
// protocol does not know, refused before it is used.
Result<std::vector<ProgCall>> decode_prog_calls(std::span<const uint8_t> code, uint64_t base,
                                                const std::vector<std::pair<uint64_t, uint64_t>>& runs) {
  std::vector<ProgCall> out;
  auto is_prog = [&](uint64_t a) {
    return std::any_of(runs.begin(), runs.end(), [&](const auto& r) { return r.second == a; });
  };
  std::optional<arch::Insn> prev;
  for (size_t off = 0; off < code.size();) {
    auto insn = arch::decode(code.data() + off, code.size() - off, base + off);
    if (!insn) return make_error(Errc::bad_format, fmt::format("image at {:#x}+{:#x}: {}", base, off,
                                                               insn.error().message));
    const CallSeen seen = call_seen(*insn, prev);
    if (seen.at && is_prog(seen.target)) {
      const size_t k = out.size();
      if (k >= runs.size() || runs[k].second != seen.target)
        return make_error(Errc::bad_format,
                          fmt::format("image at {:#x}: call #{} at {:#x} goes to {:#x}, expected {}",
                                      base, k, seen.at->address, seen.target,
                                      k < runs.size() ? fmt::format("{:#x}", runs[k].second)
                                                      : std::string("no more program calls")));
      out.push_back(prog_call(runs[k].first, *seen.at, *insn));
    }
    off += insn->length;
    prev = *insn;
  }
  if (out.size() != runs.size())
    return make_error(Errc::bad_format, fmt::format("image at {:#x}: {} program calls found, {} expected",
                                                    base, out.size(), runs.size()));
  return out;
}

// The same, without decoding the whole image: each call the emitter reports
// (ImageCode::prog_calls) is decoded and must be the next run's, and every other byte of
// the image is searched for what any call of a program must contain: its eight-byte
// address (a far call's mov), or a call opcode (E8) whose rel32 (or rel16, under an
// operand-size prefix) goes to it from where that form would end. A call of a program
// the emitter did not report contains one of these, so when none is found the reported
// calls are all of them. Anything unexpected (a report that does not match the bytes, a
// pattern elsewhere, even by chance) falls back to decoding the whole image, which
// decides. An attach and a detach each pay this once: decoding every image cost a third
// of a cycle's CPU time (docs/benchmarks.md, "Attach and detach latency").
Result<std::vector<ProgCall>> find_prog_calls(std::span<const uint8_t> code, uint64_t base,
                                              const std::vector<uint32_t>& reported,
                                              const std::vector<std::pair<uint64_t, uint64_t>>& runs) {
  if (runs.empty() && reported.empty()) return std::vector<ProgCall>{};
  auto fast = [&]() -> std::optional<std::vector<ProgCall>> {
    if (reported.size() != runs.size()) return std::nullopt;
    std::vector<ProgCall> out;
    std::vector<std::pair<size_t, size_t>> spans;  // [from, to) of each reported call
    for (size_t k = 0; k < reported.size(); ++k) {
      const size_t off = reported[k];
      if (off >= code.size()) return std::nullopt;
      auto first = arch::decode(code.data() + off, code.size() - off, base + off);
      if (!first) return std::nullopt;
      std::optional<arch::Insn> prev;
      arch::Insn call = *first;
      if (!(first->flow == arch::Flow::call && first->relative_branch)) {
        const size_t next = off + first->length;
        if (next >= code.size()) return std::nullopt;
        auto second = arch::decode(code.data() + next, code.size() - next, base + next);
        if (!second) return std::nullopt;
        prev = *first;
        call = *second;
      }
      const CallSeen seen = call_seen(call, prev);
      if (!seen.at || seen.at->address != base + off || seen.target != runs[k].second) return std::nullopt;
      out.push_back(prog_call(runs[k].first, *seen.at, call));
      spans.push_back({off, static_cast<size_t>(call.address + call.length - base)});
    }
    std::sort(spans.begin(), spans.end());
    size_t s = 0;
    for (size_t i = 0; i < code.size(); ++i) {
      while (s < spans.size() && spans[s].second <= i) ++s;
      if (s < spans.size() && spans[s].first <= i) {
        i = spans[s].second - 1;
        continue;
      }
      for (const auto& r : runs) {
        const uint64_t prog = r.second;
        uint64_t imm64 = 0;
        if (i + 8 <= code.size() && (std::memcpy(&imm64, code.data() + i, 8), imm64 == prog))
          return std::nullopt;
        if (code[i] != 0xe8) continue;
        int32_t rel32 = 0;
        if (i + 5 <= code.size() && (std::memcpy(&rel32, code.data() + i + 1, 4),
                                     base + i + 5 + static_cast<uint64_t>(int64_t{rel32}) == prog))
          return std::nullopt;
        int16_t rel16 = 0;
        if (i + 3 <= code.size() && (std::memcpy(&rel16, code.data() + i + 1, 2),
                                     base + i + 3 + static_cast<uint64_t>(int64_t{rel16}) == prog))
          return std::nullopt;
      }
    }
    return out;
  };
  if (auto out = fast()) return std::move(*out);
  return decode_prog_calls(code, base, runs);
}

}  // namespace

Result<Manager::Plan> Manager::prepare(Trampoline& t, std::vector<Link*> links, bool staged) {
  std::vector<Link*> fentry, fexit, fmod;
  Link* freplace = nullptr;
  const arch::TracerHooks* hooks = nullptr;
  for (Link* l : links) {
    switch (l->type) {
      case AttachType::fentry: fentry.push_back(l); break;
      case AttachType::fexit: fexit.push_back(l); break;
      case AttachType::fmod_ret: fmod.push_back(l); break;
      case AttachType::freplace: freplace = l; break;
      case AttachType::tracer: hooks = reinterpret_cast<const arch::TracerHooks*>(l->replacement); break;
    }
  }
  Plan plan;
  plan.t = &t;
  std::unique_ptr<Image>& img = plan.img;
  Patch patch;
  sites::SiteState& site_state = plan.site_state;

  if (freplace) {
    // No image: the site jumps straight to the replacement (through a thunk when it
    // is out of reach), which returns to the caller itself.
    uint64_t target = freplace->replacement;
    if (!arch::rel32_reaches(t.site->addr() + arch::kSiteLen, target)) {
      const auto w = arch::rel32_window(t.site->addr());
      auto code = arch::encode_jump_anywhere(w.lo, target);  // size probe
      auto block = os::ExecArena::instance().allocate(code ? code->size() : 16, w.lo, w.hi);
      if (!block) return std::move(block).error();
      auto thunk = arch::encode_jump_anywhere(block->addr, target);
      if (!thunk) return std::move(thunk).error();
      UTRAMP_TRY(os::ExecArena::instance().write(*block, 0, *thunk));
      target = block->addr;  // a few bytes per freplace attach, kept (see notes)
    }
    site_state = {sites::SiteOp::jmp, target};
    if (t.hop_target != t.pass()) UTRAMP_TRY(patch.jmp(t.hop(), t.hop_target, t.pass(), &t));
  } else if (!links.empty()) {
    const bool calls_original = !fexit.empty() || !fmod.empty() || (hooks && hooks->exit);
    img = std::make_unique<Image>();
    img->calls_original = calls_original;
    img->site_slot = t.site_slot;
    if (calls_original) {
      auto slot = alloc_counter_slot();
      if (!slot) return std::move(slot).error();
      img->slot = *slot;
    }
    arch::ImageSpec spec;
    spec.sig = &t.sig;
    spec.func = t.func;
    spec.original = t.original;
    spec.pass = t.pass();
    spec.exit_fn = t.stub_block.addr + t.stub.exit;
    spec.calls_original = calls_original;
    const auto tl = tls_layout();
    spec.tls = {tl.block, tl.counters, tl.active};
    spec.site_slot = t.site_slot;
    spec.image_slot = img->slot;
    spec.guard_left = reinterpret_cast<uint64_t>(&utramp_guard_left);
    spec.stats_begin = reinterpret_cast<uint64_t>(&utramp_stats_begin);
    spec.stats_end = reinterpret_cast<uint64_t>(&utramp_stats_end);
    const bool stats = stats_.load();
    std::vector<std::pair<uint64_t, uint64_t>> runs;  // link id, program: in run order
    auto add = [&](std::vector<arch::ImageProg>& v, Link* l) {
      v.push_back({l->prog->fn, l->prog->guard, l->cookie,
                   reinterpret_cast<uint64_t>(l->prog->misses_at),
                   stats ? reinterpret_cast<uint64_t>(l->prog->stats_at) : 0});
      runs.push_back({l->id, l->prog->fn});
    };
    for (Link* l : fentry) add(spec.fentry, l);
    for (Link* l : fmod) add(spec.fmod_ret, l);
    for (Link* l : fexit) add(spec.fexit, l);
    if (hooks) spec.tracer = *hooks;
    spec.store_caller = std::any_of(links.begin(), links.end(), [](Link* l) { return l->caller; });
    spec.store_frame = std::any_of(links.begin(), links.end(), [](Link* l) { return l->frame; });
    spec.preserve_all = t.preserve_all;
    if (t.preserve_all) spec.xstate = arch::host_xstate();
    // Within rel32 of the stub: the hop jumps to the image, the image to pass/exit.
    const auto w = arch::rel32_window(t.stub_block.addr);
    auto block = os::ExecArena::instance().allocate(arch::image_size_bound(spec), w.lo, w.hi);
    auto fail = [&](Error e) -> Error {
      if (block) os::ExecArena::instance().free(*block);
      if (img->slot != UINT32_MAX) free_counter_slot(img->slot);
      return make_error(e.code, fmt::format("{}: {}", t.name(), e.message));
    };
    if (!block) return fail(block.error());
    if (auto r = patch.jmp(t.hop(), t.hop_target, block->addr, &t); !r) return fail(r.error());
    auto code = arch::emit_image(spec, block->addr);
    if (!code) return fail(code.error());
    if (code->code.size() > block->size)
      return fail(make_error(Errc::too_big, fmt::format("image of {} bytes over its bound {}",
                                                        code->code.size(), block->size)));
    // The bound is about three times the code: what is left goes to the next blocks
    // (a tracer's 1,000 images took 11 chunks, each a /proc/self/maps read and 256 KiB
    // filled, instead of 4).
    os::ExecArena::instance().shrink(*block, code->code.size());
    auto calls = find_prog_calls(code->code, block->addr, code->prog_calls, runs);
    if (!calls) return fail(calls.error());
    img->calls = std::move(*calls);
    // Staged: nothing can reach the image before publish(), which follows the batch's
    // seal (os::ExecArena::seal_staged) and register_images().
    auto& arena = os::ExecArena::instance();
    if (auto r = staged ? arena.stage(*block, 0, code->code) : arena.write(*block, 0, code->code); !r)
      return fail(r.error());
    img->block = *block;
    plan.unregistered = arch::ImageFrame{block->addr, code->code.size(), code->exits, code->exit_len,
                                         code->exit_push};
    if (!staged)
      if (auto r = register_image(plan); !r) return fail(r.error());
    site_state = {sites::SiteOp::jmp, t.stub_block.addr};
  } else {
    // No links: the site returns to its NOP and the hop to the pass-through.
    site_state = {};
    if (t.hop_target != t.pass()) UTRAMP_TRY(patch.jmp(t.hop(), t.hop_target, t.pass(), &t));
  }

  plan.hop_ops = std::move(patch.ops);
  plan.links = std::move(links);
  return plan;
}

// Unwind info, perf map and gdb for a plan's new image, whose code is written: published
// before anything can reach the image.
Result<void> Manager::register_image(Plan& plan) {
  Plan* one = &plan;
  return std::move(register_images({&one, 1}).front());
}

std::vector<Result<void>> Manager::register_images(std::span<Plan* const> plans) {
  std::vector<const arch::ImageFrame*> frames;
  std::vector<std::string> name_store;  // what `names` views: kept until registered
  std::vector<size_t> which;
  frames.reserve(plans.size());
  name_store.reserve(plans.size());
  which.reserve(plans.size());
  for (size_t i = 0; i < plans.size(); ++i)
    if (plans[i]->unregistered) {
      frames.push_back(&*plans[i]->unregistered);
      name_store.push_back(image_name(*plans[i]->t));
      which.push_back(i);
    }
  std::vector<Result<void>> out(plans.size());
  if (frames.empty()) return out;
  const std::vector<std::string_view> names(name_store.begin(), name_store.end());
  auto dbg = arch::register_images(frames, names, reinterpret_cast<void*>(&utramp_image_personality));
  const bool perf = os::perf_map_enabled();
  std::lock_guard lock(g_images_mu);
  for (size_t k = 0; k < which.size(); ++k) {
    Plan& plan = *plans[which[k]];
    if (!dbg[k]) {
      out[which[k]] = std::move(dbg[k]).error();
      continue;
    }
    Image& img = *plan.img;
    const Trampoline& t = *plan.t;
    img.debug = *dbg[k];
    if (perf) os::perf_map_append(plan.unregistered->start, plan.unregistered->size, image_name(t));
    images()[img.block.addr] = {img.calls_original ? img.slot : t.site_slot,
                                img.block.addr + plan.unregistered->size, t.func, img.calls_original};
    plan.unregistered.reset();
  }
  return out;
}

void Manager::unmake_stubs(MadeStubs& w) {
  for (auto it = w.made.rbegin(); it != w.made.rend(); ++it) {
    Trampoline* t = it->first;
    for (uint64_t at : {t->func, t->site->addr()})
      if (auto m = tramp_at_.find(at); m != tramp_at_.end() && m->second == t) tramp_at_.erase(m);
    if (t->site->info.kind == sites::SiteKind::prologue) t->site->prologue_ool = it->second;
    os::ExecArena::instance().free(t->stub_block);
    free_counter_slot(t->site_slot);
    std::erase_if(tramps_, [t](const std::unique_ptr<Trampoline>& x) { return x.get() == t; });
  }
  w.made.clear();
}

namespace {

// Unpublishes an image that never became reachable.
void drop_image(std::unique_ptr<Manager::Image>& img) {
  if (!img || !img->block) return;
  free_image(*img);
  img.reset();
}

}  // namespace

// Makes `plans` live: every site that changes (into its stub, back to its NOP, freplace)
// and every stub's hop that changes, in one patch batch (all or nothing). During the
// batch a thread finds each of them old, trapped (sent on as the new code would), or
// new, in any combination, and every combination is code that may run:
//   - a site that now goes to its stub, reached through a hop not yet changed: the hop
//     of a stub that no site went to goes to the function's body (pass), so the call
//     runs untraced, as it did before the change;
//   - a hop that goes to a new image: it is built and published before the batch;
//   - a hop not yet changed that goes to an old image: old images are retired only
//     after the batch, and freed only once every thread is seen out of them;
//   - a site going back to its NOP while its hop changes too: either way the call runs
//     the old image, or the new one, or the body (pass).
// The hop of a stub no site goes to is always pass, since the batch that took its site
// away changed the hop too, or (failing) changed nothing.
// Then each trampoline's old image is retired.
Result<void> Manager::publish(std::vector<Plan>& plans, bool wake) {
  auto& table = sites::SiteTable::instance();
  auto to_stub = [](const Plan& p) {
    return p.site_state.op == sites::SiteOp::jmp && p.site_state.target == p.t->stub_block.addr;
  };
  std::vector<patch::PatchOp> hops;
  std::vector<Plan*> site_changes;
  size_t n_hops = 0;
  for (const Plan& p : plans) n_hops += p.hop_ops.size();
  // With room for the sites' ops: the commit appends them here, not to a copy.
  hops.reserve(n_hops + plans.size());
  site_changes.reserve(plans.size());
  for (Plan& p : plans) {
    for (auto& op : p.hop_ops) hops.push_back(std::move(op));
    std::vector<patch::PatchOp>().swap(p.hop_ops);  // moved: freed before the commit allocates
    if (!(p.t->site->applied == p.site_state)) site_changes.push_back(&p);
  }
  auto discard_all = [&] {
    for (Plan& p : plans) drop_image(p.img);
  };
  Result<void> done;
  if (site_changes.empty()) {
    if (!hops.empty()) done = patch::apply(hops);
  } else {
    for (Plan* p : site_changes)
      if (auto r = table.set_desired(p->t->site, p->site_state); !r) {
        done = std::move(r).error();
        break;
      }
    if (done) done = table.commit(std::move(hops));
    if (!done)
      for (Plan* p : site_changes) (void)table.set_desired(p->t->site, p->t->site->applied);
  }
  if (!done) {
    discard_all();
    return std::move(done).error();
  }
  for (Plan& p : plans) {
    Trampoline& t = *p.t;
    t.site_to_stub = to_stub(p);
    t.hop_target = p.img ? p.img->block.addr : t.pass();
    t.links = std::move(p.links);
    std::unique_ptr<Image> old = std::move(t.image);
    t.image = std::move(p.img);
    if (old) retire(t, old.release(), wake);
  }
  return {};
}

Result<void> Manager::rebuild(Trampoline& t, std::vector<Link*> links) {
  auto plan = prepare(t, std::move(links));
  if (!plan) return std::move(plan).error();
  std::vector<Plan> plans;
  plans.push_back(std::move(*plan));
  return publish(plans);
}

void Manager::retire(Trampoline&, Image* img, bool wake) {
  {
    std::lock_guard rl(retired_mu_);
    retired_.push_back(std::make_unique<Retired>(Retired{std::unique_ptr<Image>(img), ++retire_seq_}));
  }
  // The reclaimer is started by the caller once mu_ is released (ReclaimerKick): creating
  // a thread takes the loader's TLS lock, which a thread inside dlopen (the loader hook)
  // may hold while it waits for mu_.
  reclaimer_wanted_.store(true, std::memory_order_relaxed);
  if (wake) cv_.notify_all();
}

// Checks one new link against the trampoline's links (and those about to join it) and
// makes it, with its program. Nothing is published.
Result<std::unique_ptr<Link>> Manager::make_link(Trampoline& t, AttachType type, uint64_t prog,
                                                 const AttachOptions& opts,
                                                 const std::vector<Link*>& links) {
  if (opts.signature && !t.sig.known) t.sig = *opts.signature;  // a better signature
  // Named only in a refusal (a tracer makes thousands of links).
  auto what = [&] { return fmt::format("{} on {}", attach_type_name(type), t.name()); };
  const bool has_freplace = std::any_of(links.begin(), links.end(),
                                        [](Link* l) { return l->type == AttachType::freplace; });
  // freplace jumps from the site straight to the replacement, which must find the
  // function's entry state there; an mcount site is reached with the frame set up.
  if (type == AttachType::freplace && t.site->info.kind == sites::SiteKind::mcount)
    return make_error(Errc::unsupported,
                      fmt::format("{}: its site is the -pg profiling call at {}, reached after "
                                  "the function set up its frame: freplace needs an entry "
                                  "site (build with -pg -mfentry or "
                                  "-fpatchable-function-entry=5); fentry, fexit and fmod_ret work",
                                  what(), t.site->label()));
  if (type == AttachType::freplace && !links.empty())
    return make_error(Errc::busy, fmt::format("{}: the function already has {} link(s); freplace "
                                              "replaces the whole function and cannot be "
                                              "combined with fentry/fexit/fmod_ret",
                                              what(), links.size()));
  if (type != AttachType::freplace && has_freplace)
    return make_error(Errc::busy, fmt::format("{}: the function is replaced (freplace); detach "
                                              "that first", what()));
  if (type == AttachType::tracer &&
      std::any_of(links.begin(), links.end(), [](Link* l) { return l->type == AttachType::tracer; }))
    return make_error(Errc::busy, fmt::format("{}: the function already has a tracer", what()));
  if (type == AttachType::tracer) {
    const auto* h = reinterpret_cast<const arch::TracerHooks*>(prog);
    if (!h || !h->entry || !h->entry_general || (h->exit && !h->exit_general))
      return make_error(Errc::invalid_argument, fmt::format("{}: incomplete tracer hooks", what()));
    if (h->exit && t.sig.noreturn)
      return make_error(Errc::invalid_argument,
                        fmt::format("{}: the function never returns (noreturn)", what()));
  }
  if ((type == AttachType::fexit || type == AttachType::fmod_ret) && t.sig.noreturn)
    return make_error(Errc::invalid_argument,
                      fmt::format("{}: the function never returns (noreturn)", what()));
  if (type == AttachType::fmod_ret) {
    if (!t.site->error_injectable)
      return make_error(Errc::invalid_argument,
                        fmt::format("{}: not marked with UTRAMP_ALLOW_ERROR_INJECTION({})", what(),
                                    t.name()));
    const auto& r = t.sig.ret;
    const bool int_ret = r.kind == RetType::Kind::none ||
                         (r.kind == RetType::Kind::reg && r.parts[0] == Part::integer &&
                          r.parts[1] == Part::none && !r.aggregate);
    if (t.sig.known && !int_ret)
      return make_error(Errc::invalid_argument,
                        fmt::format("{}: fmod_ret needs an integer, pointer or void return, the "
                                    "function returns {}",
                                    what(), t.sig.describe()));
  }
  if (links.size() >= kMaxLinks)
    return make_error(Errc::out_of_range,
                      fmt::format("{}: already {} links, the most one function takes", what(),
                                  kMaxLinks));
  auto link = std::make_unique<Link>();
  link->tramp = &t;
  link->type = type;
  link->cookie = opts.cookie;
  link->caller = opts.caller;
  link->frame = opts.frame;
  link->id = next_link_id_++;
  if (type == AttachType::freplace || type == AttachType::tracer) {
    link->replacement = prog;
    return link;
  }
  Prog* p = nullptr;
  for (auto& q : progs_)
    if (q->fn == prog) p = q.get();
  if (!p) {
    // Guard slots are never released: an old image may still guard with this one.
    auto g = alloc_prog_slot();
    if (!g) return std::move(g).error();
    auto np = std::make_unique<Prog>();
    np->fn = prog;
    np->guard = *g;
    if (opts.stats_at) np->stats_at = opts.stats_at;
    if (opts.misses_at) np->misses_at = opts.misses_at;
    progs_.push_back(std::move(np));
    p = progs_.back().get();
  } else if (p->links == 0) {
    // A program at the address of one whose links are all gone: its code was freed after
    // the grace period (after_grace) and this is another, which counts where its own
    // first link says; no image left counts where the old one did.
    p->stats_at = opts.stats_at ? opts.stats_at : &p->stats;
    p->misses_at = opts.misses_at ? opts.misses_at : &p->misses;
  }
  link->prog = p;
  return link;
}

Result<Link*> Manager::attach(uint64_t func, AttachType type, uint64_t prog,
                              const AttachOptions& opts) {
  auto r = attach_many({AttachRequest{func, type, prog, opts}});
  return std::move(r.front());
}

std::vector<Result<Link*>> Manager::attach_many(const std::vector<AttachRequest>& reqs) {
  ReclaimerKick kick{*this};  // destroyed after the lock below is released
  std::lock_guard lock(mu_);
  // Each site's check and commit asks whether the process runs other threads: one scan
  // of /proc/self/task for the whole batch (no thread is made under mu_: ReclaimerKick).
  const os::ThreadCountOnce once;
  std::vector<Result<Link*>> out(reqs.size(), Result<Link*>(make_error(Errc::busy, "not attached")));
  // Links per trampoline, in request order, made but not yet published.
  std::vector<std::pair<Trampoline*, std::vector<size_t>>> groups;
  std::unordered_map<Trampoline*, size_t> group_of;
  groups.reserve(reqs.size());
  group_of.reserve(reqs.size());
  std::vector<std::unique_ptr<Link>> made(reqs.size());
  // The trampolines made here: their stubs are staged as they are made and sealed with
  // the images below.
  MadeStubs stubs;
  // New trampolines read their functions' signatures from DWARF: many of one object are
  // looked up through its index, built at once (os::expect_lookups), and let go once
  // they are made (os::lookups_done).
  std::map<std::string, size_t> per_object;
  {
    auto& table = sites::SiteTable::instance();
    for (const AttachRequest& q : reqs)
      if (!q.opts.signature && !tramp_at_.count(q.func))
        if (const sites::Site* s = table.find(q.func)) ++per_object[s->object()];
    for (const auto& [path, n] : per_object) os::expect_lookups(path, n);
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    const AttachRequest& q = reqs[i];
    if (!q.prog) {
      out[i] = make_error(Errc::invalid_argument, fmt::format("{} on {:#x}: the program is NULL",
                                                              attach_type_name(q.type), q.func));
      continue;
    }
    auto tr = trampoline_for(q.func, q.opts, stubs);
    if (!tr) {
      out[i] = std::move(tr).error();
      continue;
    }
    // groups[group_of[t]] is t's (a map: one request per function over thousands).
    auto [at, fresh] = group_of.try_emplace(*tr, groups.size());
    if (fresh) groups.push_back({*tr, {}});
    auto g = groups.begin() + static_cast<std::ptrdiff_t>(at->second);
    std::vector<Link*> pending = (*tr)->links;
    for (size_t j : g->second) pending.push_back(made[j].get());
    auto l = make_link(**tr, q.type, q.prog, q.opts, pending);
    if (!l) {
      out[i] = std::move(l).error();
      continue;
    }
    made[i] = std::move(*l);
    g->second.push_back(i);
  }
  for (const auto& [path, n] : per_object) os::lookups_done(path, n);
  std::unordered_map<Trampoline*, size_t>().swap(group_of);  // the loop's alone
  std::vector<Plan> plans;
  std::vector<const std::vector<size_t>*> plan_reqs;
  auto& table = sites::SiteTable::instance();
  // Each new image's code is staged in its block as it is made, as the stubs were: no
  // copy on the heap, no write through /proc/self/mem (a tracer's 1,000 functions kept
  // 1.1 MB of code on the heap for such writes, a page fault per 4 KiB, and the writes
  // cost 4 % of the program's start-up).
  plans.reserve(groups.size());
  plan_reqs.reserve(groups.size());
  for (auto& [t, idx] : groups) {
    if (idx.empty()) continue;
    std::vector<Link*> links = t->links;
    for (size_t j : idx) links.push_back(made[j].get());
    // A site the batch's commit would refuse (a prologue that needs the other threads
    // stopped, in a process that runs some) is left out with its reason here: the
    // batch is all or nothing, and the other functions must not fail for it.
    auto plan = prepare(*t, std::move(links), /*staged=*/true);
    if (!plan) {
      for (size_t j : idx) out[j] = plan.error();
      continue;
    }
    if (!(t->site->applied == plan->site_state))
      if (auto c = table.check_desired(t->site, plan->site_state); !c) {
        drop_image(plan->img);  // its staged code, never to run: the block is freed
        for (size_t j : idx) out[j] = c.error();
        continue;
      }
    plans.push_back(std::move(*plan));
    plan_reqs.push_back(&idx);
  }
  // Every stub and image of the batch read+exec, before anything reads their code as
  // executable memory (their registration, the patcher's checks of the hop operations)
  // and before anything can reach them (publish). Also when no plan is left: a
  // trampoline made here stays, and its stub must be sealed before any later change
  // makes it reachable.
  if (auto sealed = os::ExecArena::instance().seal_staged(); !sealed) {
    // Nothing was published: every request fails, and what was made for them is undone.
    for (Plan& p : plans) drop_image(p.img);
    unmake_stubs(stubs);
    for (size_t i = 0; i < reqs.size(); ++i)
      if (made[i])
        out[i] = make_error(sealed.error().code, "cannot seal the trampolines' code: " + sealed.error().message);
    return out;
  }
  if (plans.empty()) return out;
  {
    // One registration for the batch's images (one record for the unwinder and gdb).
    std::vector<Plan*> all(plans.size());
    for (size_t k = 0; k < plans.size(); ++k) all[k] = &plans[k];
    auto registered = register_images(all);
    size_t kept = 0;
    for (size_t k = 0; k < plans.size(); ++k) {
      if (auto& r = registered[k]; !r) {
        drop_image(plans[k].img);
        for (size_t j : *plan_reqs[k]) out[j] = make_error(r.error().code,
                                                           fmt::format("{}: {}", plans[k].t->name(), r.error().message));
        continue;
      }
      if (kept != k) {
        plans[kept] = std::move(plans[k]);
        plan_reqs[kept] = plan_reqs[k];
      }
      ++kept;
    }
    plans.resize(kept);
    plan_reqs.resize(kept);
  }
  if (plans.empty()) return out;
  if (auto r = publish(plans); !r) {
    for (auto* idx : plan_reqs)
      for (size_t j : *idx) out[j] = r.error();
    return out;
  }
  for (auto* idx : plan_reqs)
    for (size_t j : *idx) {
      Link* l = made[j].get();
      if (l->prog) ++l->prog->links;
      l->attached = true;
      links_.push_back(std::move(made[j]));
      out[j] = l;
    }
  return out;
}

Result<Link*> Manager::attach_name(const std::string& symbol, AttachType type, uint64_t prog,
                                   const AttachOptions& opts) {
  auto& table = sites::SiteTable::instance();
  sites::Site* s = table.find_name(symbol);
  if (!s) {
    UTRAMP_TRY(table.discover());
    auto c = table.canonicalize(sites::Quiescence::live);
    if (!c) return std::move(c).error();
    s = table.find_name(symbol);
  }
  if (!s) return make_error(Errc::not_found, fmt::format("no function named '{}'", symbol));
  return attach(s->info.func, type, prog, opts);
}

// Detach (docs/trampolines.md, "Detach"): when it returns, no program of the link runs
// and none will, although threads may still be inside the images that called it (asleep
// in the traced function, or preempted between a stub and its image):
//   1. under the lock, an image without the link is published; the old one is retired
//      (nothing changes when this fails);
//   2. outside it, quiesce(): usually every thread is soon seen out of the retired
//      images that run the program, and they are freed; where one stays in (asleep in
//      the function), their calls of the program are disabled instead, and what is left
//      is to wait for runs of the program already begun.
Result<void> Manager::detach(Link* link) {
  auto r = detach_many({link});
  return std::move(r.front());
}

std::vector<Result<void>> Manager::detach_many(const std::vector<Link*>& req) {
  std::vector<Result<void>> out(req.size(), Result<void>());
  std::vector<Leaving> leaving;
  {
    ReclaimerKick kick{*this};  // destroyed after the lock below is released
    std::lock_guard lock(mu_);
    std::unordered_set<const Link*> live;
    for (const auto& l : links_) live.insert(l.get());
    const auto frame = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
    // The links to remove, per trampoline, in request order.
    std::vector<std::pair<Trampoline*, std::vector<size_t>>> groups;
    std::unordered_map<Trampoline*, size_t> group_of;
    std::unordered_set<const Link*> taken;  // a link named twice is detached once
    for (size_t i = 0; i < req.size(); ++i) {
      Link* link = req[i];
      if (!link || !live.count(link) || !taken.insert(link).second) {
        out[i] = make_error(Errc::not_found, "detach: not a live link (already detached?)");
        continue;
      }
      Trampoline& t = *link->tramp;
      if (link->prog && this_thread_runs(link->prog->guard, frame)) {
        out[i] = make_error(Errc::busy,
                            fmt::format("detach of {} on {}: called from inside its own program, "
                                        "it would wait for itself",
                                        attach_type_name(link->type), t.name()));
        continue;
      }
      auto [at, fresh] = group_of.try_emplace(&t, groups.size());
      if (fresh) groups.push_back({&t, {}});
      groups[at->second].second.push_back(i);
    }
    std::vector<Plan> plans;
    std::vector<const std::vector<size_t>*> plan_reqs;
    for (auto& [t, idx] : groups) {
      std::unordered_set<const Link*> gone;
      for (size_t j : idx) gone.insert(req[j]);
      std::vector<Link*> links;
      for (Link* l : t->links)
        if (!gone.count(l)) links.push_back(l);
      auto plan = prepare(*t, std::move(links));
      if (!plan) {
        for (size_t j : idx) out[j] = plan.error();
        continue;
      }
      plans.push_back(std::move(*plan));
      plan_reqs.push_back(&idx);
    }
    if (plans.empty()) return out;
    // The reclaimer is not woken: quiesce() below reclaims these images on this thread
    // (a woken reclaimer only contended with it for the reclamation lock: 0.6 ms waits
    // seen under strace), and wakes it for what is left.
    if (auto r = publish(plans, false); !r) {
      for (auto* idx : plan_reqs)
        for (size_t j : *idx) out[j] = r.error();
      return out;
    }
    std::unordered_set<const Link*> freed;
    for (auto* idx : plan_reqs)
      for (size_t j : *idx) {
        Link* link = req[j];
        // The guard slot is never freed (nor the Prog): images, old ones included, keep
        // the index, and a later link of the same program reuses both (1024 distinct
        // programs per process).
        if (Prog* prog = link->prog) {
          --prog->links;
          leaving.push_back({link->id, prog->guard, link->tramp->name()});
        }
        freed.insert(link);
      }
    std::erase_if(links_, [&](const std::unique_ptr<Link>& l) { return freed.count(l.get()) != 0; });
  }
  if (!leaving.empty()) quiesce(std::move(leaving));
  if (retired() != 0) cv_.notify_all();  // images no leaving program runs, or disabled ones
  return out;
}

namespace {

// How long detach lets threads leave the retired images on their own before it disables
// the images' calls of the program (a patch batch, and a trap-table entry per call for
// good): longer than a thread preempted in an image usually stays there, short enough
// not to matter next to a thread asleep in the function.
constexpr auto kLeaveBudget = std::chrono::milliseconds(10);

}  // namespace

bool Manager::still_run(std::vector<Leaving>& leaving) const {
  std::lock_guard rl(retired_mu_);
  if (leaving.size() <= 4) {
    // One detach (the common case, called in a loop while threads leave): no set.
    std::erase_if(leaving, [&](const Leaving& l) {
      for (const auto& r : retired_)
        for (const ProgCall& c : r->image->calls)
          if (c.link_id == l.id) return false;
      return true;
    });
    return !leaving.empty();
  }
  std::unordered_set<uint64_t> run;  // link ids some retired image calls
  for (const auto& r : retired_)
    for (const ProgCall& c : r->image->calls) run.insert(c.link_id);
  std::erase_if(leaving, [&](const Leaving& l) { return !run.count(l.id); });
  return !leaving.empty();
}

// Step 2 of detach, for every link detached together. The retired images that run a
// link's program are freed by reclamation once every thread has been seen out of them
// (reclaim_now); no thread can enter them again (publishing the new image ended with a
// membarrier), so then no run of the program through this link remains. Otherwise, after
// kLeaveBudget, their calls of it are disabled (disable_calls, one batch for all) and only
// runs already begun are waited for (wait_outside). If that patch cannot be made (out of
// executable memory near an image), the images are waited for however long it takes.
void Manager::quiesce(std::vector<Leaving> leaving) {
  const auto deadline = std::chrono::steady_clock::now() + kLeaveBudget;
  for (unsigned spins = 0; still_run(leaving); ++spins) {
    if (std::chrono::steady_clock::now() >= deadline) {
      if (disable_calls(leaving)) {
        // Links of one program share its guard: one wait each.
        std::vector<uint32_t> guards;
        for (const Leaving& l : leaving) guards.push_back(l.guard);
        std::sort(guards.begin(), guards.end());
        guards.erase(std::unique(guards.begin(), guards.end()), guards.end());
        for (uint32_t g : guards) wait_outside(g);
        return;
      }
      while (still_run(leaving)) {
        reclaim_now();
        backoff(64);
      }
      return;
    }
    reclaim_now();
    if (still_run(leaving)) backoff(spins);
  }
}

// The calls of the leaving links' programs in every retired image not yet freed. A near call
// becomes a call of a thunk that jumps to skipped_program; a far one (mov r11, imm64;
// call r11) has its mov become a jump to a thunk that calls the same and jumps back
// after the `call r11`:
//
//   near:  call prog             ->  call J
//   far:   mov r11, prog         ->  jmp T ; nop5
//          call r11                  call r11      (reached only by a thread already
//                                                  past the mov: it runs the program)
//   J:     jmp skipped_program   (rel32, or absolute when out of reach)
//   T:     call J ; jmp <after call r11>
//
// The thunks lie within rel32 reach of the image and are freed with it. A thread that
// traps on a call being changed is sent on as the disabled call goes. The reclaimer is
// held off (g_reclaim_mu) while the images are patched.
Result<void> Manager::disable_calls(const std::vector<Leaving>& leaving) {
  std::unordered_map<uint64_t, const std::string*> name_of;
  for (const Leaving& l : leaving) name_of[l.id] = &l.name;
  ReclaimLock serial;
  std::vector<Image*> imgs;
  {
    std::lock_guard rl(retired_mu_);
    for (auto& r : retired_) imgs.push_back(r->image.get());
  }
  std::vector<patch::PatchOp> ops;
  std::vector<ProgCall*> changed;
  for (Image* img : imgs) {
    std::vector<ProgCall*> mine;
    for (ProgCall& c : img->calls)
      if (name_of.count(c.link_id) && !c.disabled) mine.push_back(&c);
    if (mine.empty()) continue;
    UTRAMP_TRY(make_skips(*img, mine));
    for (ProgCall* c : mine) {
      const patch::Emulation em = c->far ? patch::Emulation::jump_to(c->skip_to)
                                         : patch::Emulation::call(c->skip_to, c->at + c->bytes.size());
      ops.push_back({c->at, c->bytes, c->skip, em,
                     fmt::format("{} image+{:#x}", *name_of[c->link_id], c->at - img->block.addr)});
      changed.push_back(c);
    }
  }
  if (ops.empty()) return {};
  UTRAMP_TRY(patch::apply(ops));
  for (ProgCall* c : changed) c->disabled = true;
  return {};
}

// The thunks of disable_calls for `calls` of `img` that have none yet, and the bytes
// each call is replaced with.
Result<void> Manager::make_skips(Image& img, const std::vector<ProgCall*>& calls) {
  std::vector<ProgCall*> todo;
  for (ProgCall* c : calls)
    if (c->skip.empty()) todo.push_back(c);
  if (todo.empty()) return {};
  const arch::Window a = arch::rel32_window(img.block.addr);
  const arch::Window b = arch::rel32_window(img.block.addr + img.block.size);
  const uint64_t lo = std::max(a.lo, b.lo), hi = std::min(a.hi, b.hi);
  const auto skip_fn = reinterpret_cast<uint64_t>(&skipped_program);
  constexpr size_t j_len = 32;  // J, in its longest (absolute) form, and padding
  const size_t far = static_cast<size_t>(
      std::count_if(todo.begin(), todo.end(), [](const ProgCall* c) { return c->far; }));
  const size_t t_len = 2 * arch::kSiteLen;  // call J ; jmp back
  auto block = os::ExecArena::instance().allocate(j_len + far * t_len, lo, hi);
  if (!block) return std::move(block).error();
  auto fail = [&](Error e) -> Error {
    os::ExecArena::instance().free(*block);
    return e;
  };
  const uint64_t j = block->addr;
  auto jump = arch::encode_jump_anywhere(j, skip_fn);
  if (!jump) return fail(jump.error());
  if (jump->size() > j_len)
    return fail(make_error(Errc::too_big, fmt::format("a jump of {} bytes", jump->size())));
  std::vector<uint8_t> code(block->size, arch::kTrapByte);
  std::copy(jump->begin(), jump->end(), code.begin());
  std::vector<std::pair<ProgCall*, std::vector<uint8_t>>> skips;
  uint64_t next = j + j_len;
  for (ProgCall* c : todo) {
    std::vector<uint8_t> bytes;
    uint64_t to = j;
    if (!c->far) {
      auto call = arch::encode_call(c->at, j);
      if (!call) return fail(call.error());
      bytes.assign(call->begin(), call->end());
    } else {
      to = next;
      next += t_len;
      auto call = arch::encode_call(to, j);
      auto back = arch::encode_jmp(to + arch::kSiteLen, c->resume);
      auto go = arch::encode_jmp(c->at, to);
      if (!call || !back || !go) return fail(!call ? call.error() : !back ? back.error() : go.error());
      std::copy(call->begin(), call->end(), code.begin() + static_cast<ptrdiff_t>(to - j));
      std::copy(back->begin(), back->end(), code.begin() + static_cast<ptrdiff_t>(to - j + arch::kSiteLen));
      bytes.assign(go->begin(), go->end());
      while (bytes.size() + arch::kNop5.size() <= c->bytes.size())
        bytes.insert(bytes.end(), arch::kNop5.begin(), arch::kNop5.end());
      bytes.resize(c->bytes.size(), arch::kNop1);
    }
    if (bytes.size() != c->bytes.size())
      return fail(make_error(Errc::bad_format,
                             fmt::format("call at {:#x}: {} bytes, its replacement {}", c->at,
                                         c->bytes.size(), bytes.size())));
    c->skip_to = to;
    skips.push_back({c, std::move(bytes)});
  }
  if (auto r = os::ExecArena::instance().write(*block, 0, code); !r) return fail(r.error());
  for (auto& [c, bytes] : skips) c->skip = std::move(bytes);
  img.skips.push_back(*block);
  return {};
}

// The end of detach once the calls are disabled. Every thread that ran the program
// through a disabled call took its guard before the call (run_prog in
// arch/x86_64/image.cpp) and keeps it until the program returns; the membarrier that
// ended the patch batch made that store visible (a thread that took the guard after it
// executes the disabled call). So a thread seen with the guard free, or held by another
// run than at the first look (the run holding it then has ended), is outside for good.
// Threads that were in no run are not waited for at all; the others for as long as
// their run takes. This thread is not one of them: detach refused a call from inside
// the program, and a guard left here by a signal handler's longjmp holds no run.
void Manager::wait_outside(uint32_t guard) {
  const int self = static_cast<int>(gettid());
  const GuardSnapshot first = snapshot_guard(guard);
  std::vector<std::pair<int, uint64_t>> pending;  // tid, holder at the first look
  for (size_t i = 0; i < first.tids.size(); ++i)
    if (first.holders[i] && first.tids[i] != self) pending.push_back({first.tids[i], first.holders[i]});
  for (unsigned spins = 0; !pending.empty(); ++spins) {
    backoff(spins);
    const GuardSnapshot now = snapshot_guard(guard);
    std::erase_if(pending, [&](const std::pair<int, uint64_t>& p) {
      auto at = std::find(now.tids.begin(), now.tids.end(), p.first);
      return at == now.tids.end() || now.holders[static_cast<size_t>(at - now.tids.begin())] != p.second;
    });
  }
}

void Manager::set_stats(bool on) {
  ReclaimerKick kick{*this};  // destroyed after the lock below is released
  std::lock_guard lock(mu_);
  if (stats_.exchange(on) == on) return;
  for (auto& t : tramps_)
    if (!t->links.empty()) (void)rebuild(*t, t->links);
}

namespace {

LinkInfo info_of(const Link& l) {
  const Prog* p = l.prog;
  return {&l,
          l.id,
          l.type,
          p ? p->fn : l.replacement,
          l.cookie,
          l.tramp->func,
          l.tramp->name().c_str(),
          p ? p->stats_at->run_cnt.load(std::memory_order_relaxed) : 0,
          p ? p->stats_at->run_ns.load(std::memory_order_relaxed) : 0,
          p ? p->misses_at->load(std::memory_order_relaxed) : 0};
}

}  // namespace

std::vector<TrampolineInfo> Manager::list() {
  std::lock_guard lock(mu_);
  std::vector<TrampolineInfo> out;
  for (auto& t : tramps_) {
    TrampolineInfo ti;
    ti.function = t->name();
    ti.func = t->func;
    ti.signature = t->sig.describe();
    ti.signature_source = t->sig.source;
    ti.has_image = t->image != nullptr;
    ti.image_bytes = t->image ? t->image->block.size : 0;
    for (Link* l : t->links) ti.links.push_back(info_of(*l));
    out.push_back(std::move(ti));
  }
  return out;
}

Result<LinkInfo> Manager::link_info(const Link* link) {
  std::lock_guard lock(mu_);
  for (auto& l : links_)
    if (l.get() == link) return info_of(*l);
  return make_error(Errc::not_found, "not a live link (detached?)");
}

std::vector<LinkInfo> Manager::links() {
  std::lock_guard lock(mu_);
  std::vector<LinkInfo> out;
  out.reserve(links_.size());
  for (auto& l : links_) out.push_back(info_of(*l));
  return out;
}

size_t Manager::retired() const {
  std::lock_guard lock(retired_mu_);
  return retired_.size();
}

// An image can be freed once no thread can execute it (arch/image.hpp):
//   fentry-only: each thread has been seen with its site counter at zero since the
//                image was unpublished;
//   calls the original: each thread seen with the site counter at zero, and after that
//                with the image's own counter at zero.
// The batch that unpublished the image ended with membarrier(SYNC_CORE), which orders
// every thread's counter increment before its jump through the stub's hop.
size_t Manager::reclaim_now() {
  // One attempt at a time: the reclaimer thread and callers of reclaim_now() would
  // otherwise both free the same image, and they update the progress in Retired.
  ReclaimLock serial;
  std::vector<Retired*> cand;
  {
    std::lock_guard lock(retired_mu_);
    for (auto& r : retired_) cand.push_back(r.get());
  }
  if (cand.empty()) {
    run_due_frees();
    return 0;
  }
  std::vector<uint32_t> slots;
  for (Retired* r : cand) {
    slots.push_back(r->image->site_slot);
    slots.push_back(r->image->calls_original ? r->image->slot : r->image->site_slot);
  }
  const CounterSnapshot a = snapshot_counters(slots);
  // The second look is read only for images that call the original (below): a detach of
  // fentry programs alone need not pay a system call or two per thread for it.
  const bool any_calls_original =
      std::any_of(cand.begin(), cand.end(), [](const Retired* r) { return r->image->calls_original; });
  const CounterSnapshot b = any_calls_original ? snapshot_counters(slots) : CounterSnapshot{};
  std::map<int, size_t> in_a, in_b;  // tid -> row
  for (size_t t = 0; t < a.tids.size(); ++t) in_a[a.tids[t]] = t;
  for (size_t t = 0; t < b.tids.size(); ++t) in_b[b.tids[t]] = t;
  std::vector<Retired*> done;
  for (size_t i = 0; i < cand.size(); ++i) {
    Retired& r = *cand[i];
    if (!r.tracked) {
      // A thread registered after this can only have read the new hop.
      for (int tid : a.tids) r.pending.push_back({tid, false});
      r.tracked = true;
    }
    const bool calls_original = r.image->calls_original;
    std::erase_if(r.pending, [&](std::pair<int, bool>& p) {
      auto ia = in_a.find(p.first);
      if (ia == in_a.end()) return true;  // the thread is gone
      if (!p.second) {
        if (a.values[ia->second][2 * i] != 0) return false;
        p.second = true;  // from now on it cannot enter the image
        if (!calls_original) return true;
      } else if (a.values[ia->second][2 * i + 1] == 0) {
        return true;
      }
      // Its image counter, read after its site counter was seen at zero.
      auto ib = in_b.find(p.first);
      return ib == in_b.end() || b.values[ib->second][2 * i + 1] == 0;
    });
    if (r.pending.empty()) done.push_back(cand[i]);
  }
  if (done.empty()) return 0;
  // Nothing refers to these images any more: they are freed without mu_, so a thread
  // attaching and detaching without pause cannot starve reclamation. Once exit has begun
  // (only its thread gets here then) they are dropped and their memory left as it is:
  // freeing would touch what static destructors may have torn down.
  // Newest first: libgcc (before GCC 13) keeps registered unwind tables in a list, the
  // newest at its head, and searches it from there to deregister one. Images retired
  // together were made together, so in the reverse order each is found at once, where
  // oldest first each search walked past all the others: detaching 10,000 functions
  // spent seconds there (docs/benchmarks.md, "Attach and detach latency").
  if (!g_exiting.load(std::memory_order_acquire))
    for (auto it = done.rbegin(); it != done.rend(); ++it) free_image(*(*it)->image);
  std::sort(done.begin(), done.end());
  {
    std::lock_guard lock(retired_mu_);
    std::erase_if(retired_, [&](const std::unique_ptr<Retired>& x) {
      return std::binary_search(done.begin(), done.end(), x.get());
    });
  }
  run_due_frees();
  return done.size();
}

void Manager::after_grace(std::function<void()> free) {
  {
    std::lock_guard lock(retired_mu_);
    deferred_.push_back({retire_seq_, std::move(free)});
  }
  reclaimer_wanted_.store(true, std::memory_order_relaxed);
  cv_.notify_all();
  start_reclaimer();
}

size_t Manager::pending_frees() const {
  std::lock_guard lock(retired_mu_);
  return deferred_.size();
}

// Called with the reclamation lock (ReclaimLock) held: one caller at a time.
void Manager::run_due_frees() {
  if (g_exiting.load(std::memory_order_acquire)) return;  // left, as images are
  std::vector<std::function<void()>> due;
  {
    std::lock_guard lock(retired_mu_);
    if (deferred_.empty()) return;
    uint64_t oldest = UINT64_MAX;  // the oldest image still retired
    for (const auto& r : retired_) oldest = std::min(oldest, r->seq);
    std::erase_if(deferred_, [&](Deferred& d) {
      if (d.after >= oldest) return false;
      due.push_back(std::move(d.free));
      return true;
    });
  }
  for (auto& f : due) f();
}

Manager::ReclaimerKick::~ReclaimerKick() { m.start_reclaimer(); }

void Manager::start_reclaimer() {
  // Called with no Manager lock held. One reclaimer per process: after fork the child has
  // none (threads do not survive fork) and its pid differs from the recorded one.
  if (!reclaimer_wanted_.load(std::memory_order_relaxed)) return;
  if (g_exiting.load(std::memory_order_acquire)) return;  // it could never reclaim
  const int pid = getpid();
  int cur = reclaimer_pid_.load(std::memory_order_acquire);
  while (cur != pid)
    if (reclaimer_pid_.compare_exchange_weak(cur, pid, std::memory_order_acq_rel)) {
      try {
        std::thread([this] { reclaimer_loop(); }).detach();
      } catch (const std::system_error&) {
        // No thread now (EAGAIN): images stay retired until a later attach or detach
        // starts one; nothing is freed early.
        reclaimer_pid_.store(0, std::memory_order_release);
      }
      return;
    }
}

void Manager::reclaimer_loop() {
  t_utramp_thread = true;  // with `record --libs` the C library it calls is traced
  // With nothing retired for a second it ends (a process utramp detached from keeps no
  // thread of it but the control channel's): the decision and reclaimer_pid_'s reset
  // are made under retired_mu_, under which images are retired, so an image retired
  // after it finds the pid reset and its kick starts a new reclaimer.
  int idle = 0;
  for (;;) {
    {
      std::unique_lock lock(retired_mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return !retired_.empty() || !deferred_.empty(); });
      if (retired_.empty() && deferred_.empty()) {
        if (++idle < 20) continue;
        reclaimer_pid_.store(0, std::memory_order_release);
        return;
      }
      idle = 0;
    }
    reclaim_now();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace utramp::tramp
