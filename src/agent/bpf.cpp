#include "agent/bpf.hpp"

#include "os/file.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <fmt/format.h>
#include <unistd.h>

#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <cstddef>
#include <ctime>
#include <span>
#include <map>
#include <memory>
#include <vector>

#include "abi/ctx.hpp"
#include "arch/probe.hpp"
#include "ebpf/core.hpp"
#include "ebpf/engine.hpp"
#include "ebpf/helpers.hpp"
#include "ebpf/loader.hpp"
#include "ebpf/maps.hpp"
#include "ebpf/uprobe_binary.hpp"
#include "ebpf/usdt.hpp"
#include "ftrace/graph.hpp"
#include "os/elf_file.hpp"
#include "os/dwarf.hpp"
#include "os/safe_copy.hpp"
#include "probe/probe.hpp"
#include "sites/table.hpp"
#include "tramp/trampoline.hpp"

namespace utramp::agent {

namespace {

// The map file's record of a program's counters, as the trampoline's images count them.
static_assert(sizeof(tramp::ProgStats) == 2 * sizeof(uint64_t) &&
              offsetof(ebpf::ProgStatsRecord, run_ns) - offsetof(ebpf::ProgStatsRecord, run_cnt) ==
                  offsetof(tramp::ProgStats, run_ns) - offsetof(tramp::ProgStats, run_cnt));
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t) && std::atomic<uint64_t>::is_always_lock_free);

// What a uprobe's handler needs: the program, what bpf_get_func_ip and
// bpf_get_attach_cookie say.
struct UprobeProg {
  ebpf::NativeFn fn = nullptr;
  uint64_t ip = 0;      // the probed address (uprobe, usdt), the function's entry (uretprobe)
  uint64_t cookie = 0;  // usdt: the site's spec id in __bpf_usdt_specs (usdt.hpp); else 0
  // A uprobe at a function's entry whose program calls bpf_override_return, on a
  // function it may skip (bpf_start: ebpf::check_override and the injection rule).
  bool may_override = false;
  // Its counters in the map file (utramp run --metrics), or null: not counted.
  ebpf::ProgStatsRecord* stats = nullptr;
  // Runs skipped by the recursion rule (run_uprobe), counted in this program's word of
  // the map file's `.misses` map, which the CLI reports at the end (null: no such word).
  uint64_t* misses = nullptr;
};

// What run_uprobe calls through a pointer, for the probe layer's proof that it touches
// only general-purpose registers: the program's entry (its JIT-ed code, which calls its
// helpers directly; the interpreter's when not JIT-ed).
std::vector<uint64_t> handler_calls(const UprobeProg& u) { return {reinterpret_cast<uint64_t>(u.fn)}; }

// A uprobe or uretprobe program on a function of a shared library: attached while the
// library is loaded (at start-up, or by the loader's announcement after a dlopen),
// detached when it is unloaded, and attached again if it is loaded again.
struct LibProbe {
  ebpf::UprobeBinary lib;
  std::string func;
  uint64_t offset = 0;
  bool ret = false;     // a uretprobe
  UprobeProg* u = nullptr;
  std::string what;     // "PROG (uprobe FUNC+0x4)", for messages
  std::string object;   // "path@bias" of the loaded object it is attached in; "" waiting
  probe::Probe* probe = nullptr;
};

uint64_t monotonic_ns() {  // the vDSO's clock: no system call, async-signal-safe
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// One client's programs: the launcher's (`utramp run`: live until exit), or one
// `utramp run -p`'s, freed after the trampolines' grace period once bpf_stop took them
// away (tramp::Manager::after_grace).
struct BpfState {
  uint64_t client = kLaunchClient;
  ebpf::MapFile maps;
  std::span<uint8_t> objects;  // ebpf::kObjectsMap's value, when the CLI made one
  std::string exe;             // the program's path there
  std::vector<std::unique_ptr<ebpf::Executable>> progs;
  std::vector<std::unique_ptr<UprobeProg>> uprobes;
  std::vector<LibProbe> lib;
  // What bpf_stop takes away (`utramp run -p`): the probes attached at the start (those
  // of LibProbe included), the USDT semaphores raised, the statistics turned on.
  std::vector<probe::Probe*> probes;
  std::vector<uint64_t> semaphores;
  std::vector<tramp::Link*> links;  // its trampolines' links
  bool stats = false;
  bool printk = false;  // the helpers' printk ring is its map's
  // Each program, for `utramp show -p`: in load order, with its counters in the map
  // file (null: not counted) and what it was attached to.
  struct Shown {
    std::string name, section, kind, target;
    ebpf::ProgStatsRecord* stats = nullptr;
    uint64_t* misses = nullptr;
    size_t attachments = 0;  // links and probes made for it
  };
  std::vector<Shown> shown;
};
// Every client's, in the order they started (the agent's lock held; the launcher's, the
// one the loader's announcements touch, is g_launch too).
std::vector<BpfState*> g_states;
BpfState* g_launch = nullptr;
// Clients whose programs are counted (run --metrics): the images count while any is.
size_t g_stats_users = 0;

void stats_wanted(bool on) {
  if (on ? g_stats_users++ == 0 : --g_stats_users == 0) tramp::Manager::instance().set_stats(on);
}

// Freed once no thread can be in what it attached: its probes are detached (their
// handlers have returned) and its links too; the images those links ran in, which count
// into its map file after the program returned, are freed first (after_grace).
void free_after_grace(std::unique_ptr<BpfState> st) {
  tramp::Manager::instance().after_grace([p = st.release()] { delete p; });
}

// A uprobe program's context: the kernel's x86-64 struct pt_regs (what bpf_tracing.h's
// PT_REGS_PARM1..6, PT_REGS_RC, PT_REGS_IP and PT_REGS_SP read), preceded by the words
// the helpers find below a tracing context (helpers.cpp): ctx[-3] the attach cookie
// (a USDT site's spec id, else 0), ctx[-2] the function IP, ctx[-1] the argument count (0: a pt_regs program has
// none for bpf_get_func_arg) and abi::kCtxPtRegs (the stack helpers read the registers).
struct UprobeCtx {
  uint64_t cookie, func_ip, nargs;
  uint64_t r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};
static_assert(sizeof(UprobeCtx) == 3 * 8 + ebpf::kPtRegsSize);
// Each register where the loader's layout puts it (CO-RE on struct pt_regs and the
// verifier go by that layout).
#define UTRAMP_PT_REG_AT(f) \
  static_assert(offsetof(UprobeCtx, f) - offsetof(UprobeCtx, r15) == ebpf::pt_regs_offset(#f))
UTRAMP_PT_REG_AT(r15); UTRAMP_PT_REG_AT(r14); UTRAMP_PT_REG_AT(r13); UTRAMP_PT_REG_AT(r12);
UTRAMP_PT_REG_AT(bp);  UTRAMP_PT_REG_AT(bx);  UTRAMP_PT_REG_AT(r11); UTRAMP_PT_REG_AT(r10);
UTRAMP_PT_REG_AT(r9);  UTRAMP_PT_REG_AT(r8);  UTRAMP_PT_REG_AT(ax);  UTRAMP_PT_REG_AT(cx);
UTRAMP_PT_REG_AT(dx);  UTRAMP_PT_REG_AT(si);  UTRAMP_PT_REG_AT(di);  UTRAMP_PT_REG_AT(orig_ax);
UTRAMP_PT_REG_AT(ip);  UTRAMP_PT_REG_AT(cs);  UTRAMP_PT_REG_AT(flags); UTRAMP_PT_REG_AT(sp);
UTRAMP_PT_REG_AT(ss);
#undef UTRAMP_PT_REG_AT
// The words below pt_regs are the tracing context's header (abi/ctx.hpp).
static_assert(offsetof(UprobeCtx, cookie) == offsetof(UprobeCtx, r15) + 8 * abi::kCtxCookie);
static_assert(offsetof(UprobeCtx, func_ip) == offsetof(UprobeCtx, r15) + 8 * abi::kCtxFuncIp);
static_assert(offsetof(UprobeCtx, nargs) == offsetof(UprobeCtx, r15) + 8 * abi::kCtxArgCount);
using ebpf::kPtRegsSize;
constexpr uint64_t kUserCs = 0x33, kUserSs = 0x2b;  // the x86-64 user segment selectors

// The probe handler of every uprobe and uretprobe program (hit path: no allocation; the
// program's own faults are counted in its status). The program sees a copy: like the
// kernel's, it cannot change the registers, except through bpf_override_return: at a
// function's entry the return address is at rsp, so the handler returns for the
// function (rax = the value, rip = the return address, rsp past it) and the probe layer
// resumes there instead of running the function (a pre-handler that changed rip and
// returns non-zero: probe/probe.hpp). A return address that cannot be read (a corrupt
// stack) leaves the function to run.
//
// The recursion rule: a hit on a thread where utramp is at work (ftrace::at_work: the
// agent attaching, before main or on a dlopen, and utramp's own threads) is utramp's own
// call of a library function the program probes (malloc, memcpy, pthread_mutex_lock...),
// not the program's: the program does not run, and the run is counted as missed, as the
// kernel counts a program kept from recursing (bpf_prog_inc_misses_counter). A hit inside
// this handler (a helper's memcpy, say) is the probe layer's re-entrance: no handler
// runs, the probe counts a miss (docs/probes.md).
//
// Compiled for the general-purpose registers only (GCC, and clang since 14: without the
// attribute clang builds the context in xmm registers, and the proof fails): its one
// call through a pointer is the program's, which handler_calls names to the probe
// layer, so a program whose JIT-ed code and helpers touch no vector register runs with
// none saved around it
// (docs/probes.md, "Vector state"; docs/benchmarks.md, "Uprobes on libc's malloc").
// One handler per need, so that the plain one has no path the proof must give up on: a
// program that may call bpf_override_return gets the one that takes its request
// (kOverride: its fault-safe read of the return address reaches the C library's vector
// code), a program with run-time counters (run --metrics) the one that times it
// (kStats: clock_gettime through a PLT slot the loader may not have bound yet).
#if defined(__GNUC__)  // clang too
#define UTRAMP_GPRS_ONLY __attribute__((target("general-regs-only")))
#else
#define UTRAMP_GPRS_ONLY
#endif
template <bool kOverride, bool kStats>
UTRAMP_GPRS_ONLY int run_uprobe(arch::PtRegs* r, uint64_t cookie) {
  const auto* u = reinterpret_cast<const UprobeProg*>(cookie);
  if (ftrace::at_work()) {  // one miss, said at the end and in --metrics alike
    if (u->misses) __atomic_fetch_add(u->misses, 1, __ATOMIC_RELAXED);
    if (u->stats) __atomic_fetch_add(&u->stats->misses, 1, __ATOMIC_RELAXED);
    return 0;
  }
  UprobeCtx c{u->cookie, u->ip, abi::kCtxPtRegs, r->r15, r->r14, r->r13, r->r12, r->rbp, r->rbx, r->r11, r->r10, r->r9,
              r->r8,  r->rax, r->rcx, r->rdx, r->rsi, r->rdi, ~0ull,  r->rip, kUserCs, r->eflags, r->rsp,
              kUserSs};
  if constexpr (kOverride) ebpf::clear_override();
  const uint64_t begin = kStats ? monotonic_ns() : 0;
  (void)u->fn(&c.r15);
  if constexpr (kStats) {  // read by the CLI from the map file, while the target runs
    __atomic_fetch_add(&u->stats->run_cnt, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&u->stats->run_ns, monotonic_ns() - begin, __ATOMIC_RELAXED);
  }
  if constexpr (kOverride) {
    uint64_t rc = 0, ret = 0;
    if (!ebpf::take_override(reinterpret_cast<uint64_t>(&c.r15), &rc) || !os::safe_read(&ret, r->rsp, 8)) return 0;
    r->rax = rc;
    r->rip = ret;
    r->rsp += 8;
    return 1;
  }
  return 0;
}

// The handler of a program's probes.
probe::Handler uprobe_handler(const UprobeProg& u) {
  if (u.may_override) return u.stats ? run_uprobe<true, true> : run_uprobe<true, false>;
  return u.stats ? run_uprobe<false, true> : run_uprobe<false, false>;
}

// A uprobe program's probe at `addr`. The probe layer does not count its hits (a locked
// instruction on every hit): the program's runs are counted in its own statistics (run
// --metrics, show -p) and its misses by the probe and the recursion rule.
probe::ProbeSpec uprobe_spec(UprobeProg& u, uint64_t addr) {
  probe::ProbeSpec spec{addr, uprobe_handler(u), nullptr, reinterpret_cast<uint64_t>(&u), false, handler_calls(u)};
  spec.count_hits = false;
  return spec;
}

tramp::AttachType attach_type(ebpf::ProgKind k) {
  switch (k) {
    case ebpf::ProgKind::fentry: return tramp::AttachType::fentry;
    case ebpf::ProgKind::fexit: return tramp::AttachType::fexit;
    case ebpf::ProgKind::fmod_ret: return tramp::AttachType::fmod_ret;
    case ebpf::ProgKind::uprobe:
    case ebpf::ProgKind::uretprobe:
    case ebpf::ProgKind::usdt: break;
  }
  return tramp::AttachType::fentry;
}

// The main program's load bias: dl_iterate_phdr lists it first.
uint64_t main_bias() {
  uint64_t bias = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        *static_cast<uint64_t*>(out) = info->dlpi_addr;
        return 1;
      },
      &bias);
  return bias;
}

struct Loaded {
  std::string path;  // as the loader names it (the site table's Site::object)
  std::string key;   // "path@bias": one load of it
};

// The executable segments of every object loaded now (the program first, as
// dl_iterate_phdr lists it, named by its path), for the CLI's symbols of stacks.
std::vector<ebpf::LoadedRange> loaded_ranges(const std::string& exe) {
  struct Acc {
    std::vector<ebpf::LoadedRange> out;
    const std::string* exe;
    bool first = true;
  } acc{{}, &exe};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* a = static_cast<Acc*>(data);
        std::string path = a->first ? *a->exe : std::string(info->dlpi_name ? info->dlpi_name : "");
        a->first = false;
        if (path.empty()) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
          const uint64_t lo = info->dlpi_addr + ph.p_vaddr;
          a->out.push_back({lo, lo + ph.p_memsz, info->dlpi_addr, path});
        }
        return 0;
      },
      &acc);
  return std::move(acc.out);
}

// The shared objects loaded now (not the main program, nor the vDSO).
std::vector<Loaded> loaded_libraries() {
  std::vector<Loaded> out;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        const char* n = info->dlpi_name;
        if (n && *n && strncmp(n, "linux-vdso", 10) != 0)
          static_cast<std::vector<Loaded>*>(data)->push_back({n, fmt::format("{}@{:#x}", n, info->dlpi_addr)});
        return 0;
      },
      &out);
  return out;
}

const Loaded* loaded_as(const std::vector<Loaded>& objs, const ebpf::UprobeBinary& lib) {
  for (const Loaded& o : objs)
    if (ebpf::is_library(lib, o.path)) return &o;
  return nullptr;
}

// Where a uprobe on FUNC+OFFSET goes, FUNC being the site `s` of an object the loader
// has relocated. An IFUNC's symbol (glibc's strlen, memcpy; gcc's ifunc and
// target_clones) is its resolver, which runs when the symbol is bound, not at each call:
// the probe goes on the implementation the resolver picks, found by calling it as the
// loader does on x86-64 (no arguments), in this process (its CPU, its tunables: the
// loader's own choice, the one the program's calls reach). Only the entry: an offset into
// an implementation the CLI never saw cannot be proven an instruction boundary.
// `relocated` false (a library announced by the loader, not yet relocated, its
// resolver's data not ready): refused, said, the target goes on.
Result<uint64_t> uprobe_addr(const sites::Site& s, uint64_t offset, bool relocated, const std::string& what) {
  if (!s.info.ifunc) return s.info.func + offset;
  if (offset)
    return make_error(Errc::invalid_argument,
                      fmt::format("{}: {} is an IFUNC (its implementation is chosen at run time): only its entry "
                                  "can be probed, not +{:#x}",
                                  what, s.info.name, offset));
  if (!relocated)
    return make_error(Errc::unsupported,
                      fmt::format("{}: {} is an IFUNC in a library loaded by dlopen: its implementation is chosen "
                                  "when the library is relocated, after the probes of a loaded library go in; "
                                  "probe the implementation by name",
                                  what, s.info.name));
  const auto resolver = reinterpret_cast<uint64_t (*)()>(s.info.func);
  const uint64_t impl = resolver();
  Dl_info di{};
  if (!impl || !dladdr(reinterpret_cast<void*>(impl), &di) || !di.dli_fbase)
    return make_error(Errc::not_found,
                      fmt::format("{}: {} is an IFUNC whose resolver returned {:#x}, in no loaded object", what,
                                  s.info.name, impl));
  return impl;
}

// Where a library probe goes in `obj` (loaded): FUNC's site there, checked as the CLI
// checked the file (the offset inside the function).
Result<uint64_t> lib_probe_addr(const LibProbe& l, const Loaded& obj) {
  sites::Site* s = sites::SiteTable::instance().find_name(l.func, obj.path);
  if (!s)
    return make_error(Errc::not_found, fmt::format("{}: no function '{}' in {}", l.what, l.func, obj.path));
  if (s->info.size && l.offset >= s->info.size)
    return make_error(Errc::out_of_range, fmt::format("{}: offset {:#x} is beyond {} ({} bytes)", l.what, l.offset,
                                                      l.func, s->info.size));
  return uprobe_addr(*s, l.offset, /*relocated=*/false, l.what);
}

// Attaches a waiting library probe at `addr` (its object `obj` loaded). The program's
// ip is set first: no handler of it can run before the probe is published.
Result<void> attach_lib_probe(LibProbe& l, const Loaded& obj, uint64_t addr) {
  auto& pm = probe::Manager::instance();
  l.u->ip = addr;
  Result<probe::Probe*> p = make_error(Errc::invalid_argument, "");
  if (l.ret) {
    probe::RetprobeSpec rs;
    rs.func = addr;
    rs.ret = uprobe_handler(*l.u);
    rs.cookie = reinterpret_cast<uint64_t>(l.u);
    rs.handler_calls = handler_calls(*l.u);
    p = pm.attach_retprobe(rs);
  } else {
    const probe::ProbeSpec spec = uprobe_spec(*l.u, addr);
    auto b = pm.attach_batch(std::span(&spec, 1));
    if (b) p = b->front();
    else p = std::move(b).error();
  }
  if (!p) return make_error(p.error().code, fmt::format("cannot attach {} in {}: {}", l.what, obj.path,
                                                        p.error().message));
  l.probe = *p;
  l.object = obj.key;
  return {};
}

}  // namespace

Result<void> bpf_start(const Config& cfg, const TrustedDir& dir, std::vector<std::string>* int3s, bool live,
                       uint64_t client) {
  if (std::any_of(g_states.begin(), g_states.end(), [&](const BpfState* x) { return x->client == client; }))
    return make_error(Errc::busy, "eBPF programs of this client are attached already");
  auto st = std::make_unique<BpfState>();
  st->client = client;
  // Once an attach was tried, a thread may have reached what it wrote (an int3 of a
  // batch that then failed, a probe's handler, an image): in a running process the state
  // is then freed only after the grace period, never at once. Before main no thread of
  // the program runs yet. Declared after st: it runs first.
  struct RetireOnFailure {
    std::unique_ptr<BpfState>& st;
    bool armed = false;
    ~RetireOnFailure() {
      if (armed && st) free_after_grace(std::move(st));
    }
  } retire_on_failure{st};
  auto own = open_own_shared_file(dir, cfg.bpf_map_file);
  if (!own) return std::move(own).error();
  // The descriptor checked, mapped through its /proc name (the same open file).
  auto mf = ebpf::MapFile::attach(fmt::format("/proc/self/fd/{}", *own));
  close(*own);
  if (!mf) return std::move(mf).error();
  st->maps = std::move(*mf);
  const ebpf::MapFile& maps = st->maps;
  // The programs' counters (ebpf::kProgStatsMap), when the CLI asked for them.
  std::span<ebpf::ProgStatsRecord> prog_stats;
  ebpf::MapHeader* printk_ring = nullptr;  // taken below if a program calls bpf_printk
  for (size_t i = 0; i < maps.count(); ++i) {
    if (maps.spec(i).name == ".printk") printk_ring = maps.header(i);
    if (maps.spec(i).name == ebpf::kProgStatsMap) {
      const auto v = maps.values(i);
      if (reinterpret_cast<uintptr_t>(v.data()) % alignof(ebpf::ProgStatsRecord))
        return make_error(Errc::bad_format, "the map file's program counters are not aligned");
      prog_stats = {reinterpret_cast<ebpf::ProgStatsRecord*>(v.data()), v.size() / sizeof(ebpf::ProgStatsRecord)};
    }
  }
  for (size_t i = 0; i < maps.count(); ++i)
    if (maps.spec(i).name == ebpf::kObjectsMap) st->objects = maps.values(i);
  // Stacks a program takes (bpf_get_stack) show the real callers of frames whose return
  // address a uretprobe replaced.
  ebpf::set_return_address_fix(&probe::real_return_address);
  // The images call the statistics hooks only while they are on (tramp::Manager::set_stats),
  // as the kernel counts run time only under bpf_stats_enabled: on before anything is attached.
  if (!prog_stats.empty()) stats_wanted(true);
  st->stats = !prog_stats.empty();
  // Turned off again, the printk ring forgotten, when the start fails.
  struct Undo {
    bool armed, stats, printk;
    ~Undo() {
      if (!armed) return;
      if (stats) stats_wanted(false);
      if (printk) ebpf::set_printk_ring(nullptr);
    }
  } undo_globals{true, st->stats, false};
  size_t prog_index = 0;  // the program's record: in load order over the objects

  auto& table = sites::SiteTable::instance();
  if (auto r = table.discover(); !r) return std::move(r).error();

  const ebpf::HelperTable& helpers = ebpf::runtime_helpers();
  std::vector<tramp::Manager::AttachRequest> reqs;
  std::vector<std::string> what;
  std::vector<probe::ProbeSpec> uprobes;
  std::vector<probe::RetprobeSpec> uretprobes;
  std::vector<std::string> uprobe_what, uretprobe_what;
  // USDT semaphores (live addresses) raised once everything is attached.
  std::vector<uint64_t> semaphores;
  const uint64_t bias = main_bias();
  std::string exe;
  if (char* e = realpath("/proc/self/exe", nullptr)) {
    exe = e;
    free(e);
  }
  // The CLI's `.misses` map: one u64 per program of every object, in order.
  uint64_t* misses = nullptr;
  size_t misses_n = 0;
  for (size_t i = 0; i < maps.count(); ++i)
    if (maps.spec(i).name == ".misses") {
      auto v = maps.values(i);
      misses = reinterpret_cast<uint64_t*>(v.data());
      misses_n = v.size() / 8;
    }
  const std::vector<Loaded> libs_now = loaded_libraries();
  // Library probes: at start-up those of libraries loaded now are in the batches below
  // (all or none with the rest); the others wait for their library.
  std::vector<size_t> uprobe_lib, uretprobe_lib;  // per spec: index in st->lib + 1, 0: none
  std::unique_ptr<os::ElfFile> main_elf;  // opened when an object has usdt programs
  // The CLI checked the specs (and applied them to the same object) before the start.
  std::vector<ebpf::AttachSpec> specs;
  for (const std::string& t : cfg.bpf_attach) {
    auto a = ebpf::parse_attach_spec(t);
    if (!a) return std::move(a).error();
    specs.push_back(std::move(*a));
  }
  size_t map_base = 0;
  for (const std::string& path : cfg.bpf_objects) {
    auto obj = ebpf::load_object_file(path, helpers);
    if (!obj) return std::move(obj).error();
    // bpf_printk's lines go to one ring per process, this client's if its programs print:
    // a second client's that print too would have their lines shown by another CLI.
    if (!st->printk && printk_ring &&
        std::any_of(obj->programs.begin(), obj->programs.end(),
                    [](const ebpf::LoadedProgram& q) { return ebpf::calls_helper(q, ebpf::kTracePrintkHelper); })) {
      if (std::any_of(g_states.begin(), g_states.end(), [](const BpfState* x) { return x->printk; }))
        return make_error(Errc::busy, fmt::format("{}: its programs call bpf_printk, whose lines already go to "
                                                  "another client's `utramp run` in this process (one reader of "
                                                  "bpf_printk at a time: utramp show -p lists the clients)",
                                                  path));
      ebpf::set_printk_ring(printk_ring);
      st->printk = undo_globals.printk = true;
    }
    if (auto a = ebpf::apply_attach(*obj, specs); !a) return std::move(a).error();
    if (map_base + obj->maps.size() > maps.count())
      return make_error(Errc::bad_format, fmt::format("{}: the map file has fewer maps than the object", path));
    std::vector<uint64_t> hdr, val;
    ebpf::ExecOptions o;
    o.helpers = &helpers;
    for (size_t i = 0; i < obj->maps.size(); ++i) {
      const size_t k = map_base + i;
      if (maps.spec(k).name != obj->maps[i].name)
        return make_error(Errc::bad_format, fmt::format("{}: map {} is '{}' in the map file, '{}' in the object",
                                                        path, i, maps.spec(k).name, obj->maps[i].name));
      hdr.push_back(reinterpret_cast<uint64_t>(maps.header(k)));
      auto d = maps.values(k);  // never the map's locks, links or positions
      val.push_back(reinterpret_cast<uint64_t>(d.data()));
      o.regions.push_back({reinterpret_cast<uint64_t>(d.data()), reinterpret_cast<uint64_t>(d.data() + d.size()),
                           !obj->maps[i].readonly});
    }
    // USDT programs: their sites in the main program (the CLI made the same plan), each
    // site's spec written where usdt.bpf.h reads it.
    std::vector<ebpf::UsdtPlan> usdt;
    if (std::any_of(obj->programs.begin(), obj->programs.end(),
                    [](const ebpf::LoadedProgram& p) { return p.kind == ebpf::ProgKind::usdt; })) {
      if (!main_elf) {
        auto e = os::ElfFile::open("/proc/self/exe");
        if (!e) return std::move(e).error();
        main_elf = std::move(*e);
      }
      auto plan = ebpf::plan_usdt(*obj, *main_elf);
      if (!plan) return std::move(plan).error();
      usdt = std::move(*plan);
      ebpf::MapHeader* specs = maps.header(map_base + static_cast<size_t>(ebpf::usdt_specs_map(*obj)));
      for (const ebpf::UsdtPlan& u : usdt)
        for (size_t k = 0; k < u.sites.size(); ++k) {
          const uint32_t id = u.first_spec + static_cast<uint32_t>(k);
          const auto spec = ebpf::encode_usdt_spec(u.sites[k].parsed, 0);
          if (const int64_t rc = ebpf::map_update(specs, &id, spec.data(), 0); rc != 0)
            return make_error(Errc::io, fmt::format("{}: USDT spec {}: map update failed ({})", path, id, rc));
        }
    }
    const size_t obj_maps = map_base;
    map_base += obj->maps.size();
    std::vector<const ebpf::Executable*> by_index(obj->programs.size());  // for the prog_arrays
    // Any program of the object may run on an fentry/fexit/fmod_ret context (a tail call
    // keeps its caller's): its links publish the entry frame when any takes stacks.
    const bool takes_stacks = std::any_of(obj->programs.begin(), obj->programs.end(), [](const ebpf::LoadedProgram& q) {
      return ebpf::calls_helper(q, ebpf::kGetStackIdHelper) || ebpf::calls_helper(q, ebpf::kGetStackHelper);
    });
    for (size_t pi = 0; pi < obj->programs.size(); ++pi, ++prog_index) {
      ebpf::LoadedProgram& p = obj->programs[pi];
      ebpf::ProgStatsRecord* counters = prog_index < prog_stats.size() ? &prog_stats[prog_index] : nullptr;
      sites::Site* s = nullptr;
      const bool tail_only = ebpf::tail_call_only(*obj, pi);  // loaded, never attached
      std::optional<ebpf::UprobeBinary> lib;
      if (!tail_only && (p.kind == ebpf::ProgKind::uprobe || p.kind == ebpf::ProgKind::uretprobe)) {
        // The CLI checked BINARY against the program as it named it (a symbolic link,
        // say): anything but a library is the program here.
        auto b = ebpf::resolve_uprobe_binary(p.binary, exe);
        if (!b && b.error().code == Errc::not_found)
          return make_error(b.error().code, fmt::format("{}: program '{}' ({}): {}", path, p.name, p.section,
                                                        b.error().message));
        if (b && b->library) lib = std::move(*b);
      }
      const Loaded* lib_obj = lib ? loaded_as(libs_now, *lib) : nullptr;
      if (lib && !lib_obj && live)
        return make_error(Errc::unsupported,
                          fmt::format("{}: program '{}' ({}): {} is not loaded in the process: a running "
                                      "process's later dlopens are not watched (docs/attach.md, \"Limits\")",
                                      path, p.name, p.section, lib->path));
      if (lib) {
        if (lib_obj) s = table.find_name(p.target, lib_obj->path);
        if (lib_obj && !s)
          return make_error(Errc::not_found, fmt::format("{}: program '{}' ({}): no function '{}' in {}", path, p.name,
                                                         p.section, p.target, lib_obj->path));
      } else if (p.kind != ebpf::ProgKind::usdt && !tail_only) {
        s = table.find_name(p.target, exe);
        if (!s) s = table.find_name(p.target);  // the program's name for itself may differ
        if (!s)
          return make_error(Errc::not_found, fmt::format("{}: program '{}' ({}): no function '{}' in the target",
                                                         path, p.name, p.section, p.target));
        if (p.offset >= s->info.size && s->info.size)
          return make_error(Errc::out_of_range,
                            fmt::format("{}: program '{}' ({}): offset {:#x} is beyond {} ({} bytes)", path, p.name,
                                        p.section, p.offset, p.target, s->info.size));
      }
      auto types = ebpf::TargetTypes::open(s ? s->object() : lib ? lib->path : main_elf ? main_elf->path() : exe);
      if (auto c = ebpf::apply_core(p, obj->local_btf.get(), types ? types->get() : nullptr); !c)
        return make_error(c.error().code, fmt::format("{}: {}", path, c.error().message));
      std::optional<abi::Signature> sig;
      if (s)
        if (auto r = os::signature_from_dwarf(s->object(), s->info.func - s->bias)) sig = *r;
      abi::Signature sg = sig ? *sig : abi::Signature::fallback();
      if (sig) UTRAMP_TRY(ebpf::check_prototype(p, sg));
      UTRAMP_TRY(ebpf::check_override(p));
      const bool overrides = ebpf::calls_helper(p, ebpf::kOverrideReturnHelper);
      if (overrides && tail_only)
        return make_error(Errc::invalid_argument,
                          fmt::format("{}: program '{}' ({}) calls bpf_override_return, but it is a tail-call target "
                                      "only: no probe of its own to return for the function",
                                      path, p.name, p.section));
      if (overrides && !(s && s->error_injectable) && !cfg.bpf_allow_override)
        return make_error(Errc::invalid_argument,
                          fmt::format("{}: program '{}' ({}) calls bpf_override_return, but {} is not marked with "
                                      "UTRAMP_ALLOW_ERROR_INJECTION({}) (the rule of fmod_ret); `utramp run "
                                      "--allow-override` lets it skip any function",
                                      path, p.name, p.section, p.target, p.target));
      ebpf::resolve(p, hdr, val);
      // The same context, maps and references the CLI verified the program with
      // (loader.hpp): the JIT leaves out what the proof makes redundant.
      ebpf::ExecOptions po = o;
      ebpf::program_options(*obj, p, sg, po);
      ebpf::Program prog{p.name, p.section, std::move(p.insns)};
      auto ex = ebpf::load(std::move(prog), po, ebpf::EngineKind::jit);
      if (!ex) return make_error(ex.error().code, fmt::format("{}: program '{}': {}", path, p.name, ex.error().message));
      const std::string w = fmt::format("{} ({} {}{})", p.name, prog_kind_name(p.kind), p.target,
                                        p.offset ? fmt::format("+{:#x}", p.offset) : "");
      by_index[pi] = ex->get();
      st->shown.push_back({p.name, p.section, std::string(prog_kind_name(p.kind)),
                           p.offset ? fmt::format("{}+{:#x}", p.target, p.offset) : p.target, counters,
                           prog_index < misses_n ? misses + prog_index : nullptr,
                           p.kind == ebpf::ProgKind::usdt && !tail_only
                               ? std::find_if(usdt.begin(), usdt.end(),
                                              [&](const ebpf::UsdtPlan& u) { return u.prog == pi; })
                                     ->sites.size()
                           : tail_only || (lib && !s) ? 0
                                                      : 1});
      if (tail_only) {
        // Reached by bpf_tail_call only.
      } else if (p.kind == ebpf::ProgKind::usdt) {
        const auto plan = std::find_if(usdt.begin(), usdt.end(), [&](const ebpf::UsdtPlan& u) { return u.prog == pi; });
        for (size_t k = 0; k < plan->sites.size(); ++k) {
          const ebpf::UsdtSite& site = plan->sites[k];
          auto u = std::make_unique<UprobeProg>();
          u->fn = (*ex)->native();
          u->ip = site.pc + bias;
          u->cookie = plan->first_spec + k;
          u->stats = counters;
          if (prog_index < misses_n) u->misses = misses + prog_index;
          uprobes.push_back(uprobe_spec(*u, u->ip));
          uprobe_what.push_back(fmt::format("{} (usdt {} at {:#x})", p.name, p.target, site.pc));
          uprobe_lib.push_back(0);
          if (site.semaphore) semaphores.push_back(site.semaphore + bias);
          st->uprobes.push_back(std::move(u));
        }
      } else if (ebpf::is_uprobe(p.kind)) {
        auto u = std::make_unique<UprobeProg>();
        u->fn = (*ex)->native();
        u->may_override = overrides;
        u->stats = counters;
        if (prog_index < misses_n) u->misses = misses + prog_index;
        // A library's: kept to be attached at each load of it (LibProbe).
        const size_t lib_index = lib ? st->lib.size() + 1 : 0;
        if (lib) {
          LibProbe l;
          l.lib = *lib;
          l.func = p.target;
          l.offset = p.offset;
          l.ret = p.kind == ebpf::ProgKind::uretprobe;
          l.u = u.get();
          l.what = w;
          if (s) l.object = lib_obj->key;
          st->lib.push_back(std::move(l));
        }
        if (s) {  // in the program, or in a library loaded now: attached below with the rest
          auto at = uprobe_addr(*s, p.offset, /*relocated=*/true, fmt::format("{}: program '{}' ({})", path,
                                                                               p.name, p.section));
          if (!at) return std::move(at).error();
          u->ip = *at;
          const uint64_t cookie = reinterpret_cast<uint64_t>(u.get());
          if (p.kind == ebpf::ProgKind::uprobe) {
            uprobes.push_back(uprobe_spec(*u, u->ip));
            uprobe_what.push_back(w);
            uprobe_lib.push_back(lib_index);
          } else {
            probe::RetprobeSpec rs;
            rs.func = u->ip;
            rs.ret = uprobe_handler(*u);
            rs.cookie = cookie;
            rs.handler_calls = handler_calls(*u);
            uretprobes.push_back(rs);
            uretprobe_what.push_back(w);
            uretprobe_lib.push_back(lib_index);
          }
        }
        st->uprobes.push_back(std::move(u));
      } else {
        // Int3 entries are a recording's (record -p), kept for as long as it is and ended
        // with it, with what they need (the handlers' masks); a program's link on one
        // would keep it after the recording ended. So in a running process a program is
        // refused there, as on such a site with no recording (sites::set_trap_entries).
        if (live && s->trap_entry && s->applied.op != sites::SiteOp::nop)
          return make_error(Errc::unsupported,
                            fmt::format("cannot attach {}: {}'s entry is diverted by an int3 for a recording "
                                        "(utramp record -p) beside it, and utramp run -p does not use int3 "
                                        "entries (docs/attach.md, \"Limits\")",
                                        w, p.target));
        tramp::AttachOptions ao;
        ao.frame = takes_stacks;
        if (counters) {
          ao.stats_at = reinterpret_cast<tramp::ProgStats*>(&counters->run_cnt);
          ao.misses_at = reinterpret_cast<std::atomic<uint64_t>*>(&counters->misses);
        }
        reqs.push_back({s->info.func, attach_type(p.kind), reinterpret_cast<uint64_t>((*ex)->native()), ao});
        what.push_back(w);
      }
      st->progs.push_back(std::move(*ex));
    }
    // The prog_arrays' initialisers, before anything is attached: a program's first run
    // finds its tail-call targets in place.
    for (size_t i = 0; i < obj->maps.size(); ++i)
      for (const ebpf::MapSpec::ProgSlotInit& ps : obj->maps[i].prog_slots)
        if (const int64_t rc = ebpf::prog_array_set(maps.header(obj_maps + i), ps.slot, ps.prog, by_index[ps.prog]);
            rc != 0)
          return make_error(Errc::io, fmt::format("{}: prog_array '{}' slot {}: cannot set program '{}' ({})", path,
                                                  obj->maps[i].name, ps.slot, ps.name, rc));
  }
  // Trampolines want canonical sites (a NOP sled made one 5-byte NOP while no thread can
  // be inside it: before main). The probe layer compares code with the file, so the
  // sites are canonicalised only when trampolines are attached: then a uprobe at the
  // entry of a function with a compiler NOP site is refused as changed code.
  if (!reqs.empty()) (void)table.canonicalize(sites::Quiescence::live);
  // Probes first (one batch, all or none; then each return probe), trampolines last;
  // on any failure everything attached so far is detached again.
  auto& pm = probe::Manager::instance();
  std::vector<probe::Probe*> probes;
  auto undo_probes = [&] {
    if (!probes.empty()) (void)pm.detach_batch(probes);
  };
  retire_on_failure.armed = live;
  if (!uprobes.empty()) {
    auto b = pm.attach_batch(uprobes);
    if (!b) {
      // Name the probe at fault: the batch's message gives the address.
      std::string names;
      for (const auto& w : uprobe_what) names += (names.empty() ? "" : ", ") + w;
      return make_error(b.error().code, fmt::format("cannot attach {}: {}", names, b.error().message));
    }
    probes = std::move(*b);
    for (size_t i = 0; i < probes.size(); ++i)
      if (uprobe_lib[i]) st->lib[uprobe_lib[i] - 1].probe = probes[i];
  }
  for (size_t i = 0; i < uretprobes.size(); ++i) {
    auto r = pm.attach_retprobe(uretprobes[i]);
    if (!r) {
      undo_probes();
      return make_error(r.error().code, fmt::format("cannot attach {}: {}", uretprobe_what[i], r.error().message));
    }
    probes.push_back(*r);
    if (uretprobe_lib[i]) st->lib[uretprobe_lib[i] - 1].probe = *r;
  }
  auto& mgr = tramp::Manager::instance();
  auto res = mgr.attach_many(reqs);
  std::string errors;
  for (size_t i = 0; i < res.size(); ++i)
    if (!res[i]) errors += fmt::format("{}{}: {}", errors.empty() ? "" : "; ", what[i], res[i].error().message);
  if (!errors.empty()) {
    std::vector<tramp::Link*> made;  // taken away together: one patch batch per step
    for (auto& r : res)
      if (r) made.push_back(*r);
    (void)mgr.detach_many(made);
    undo_probes();
    return make_error(Errc::invalid_argument, "cannot attach " + errors);
  }
  // The uprobes that stayed int3s, named as the errors name them.
  std::map<uint64_t, std::string> what_by_cookie;
  for (size_t i = 0; i < uprobes.size(); ++i) what_by_cookie[uprobes[i].cookie] = uprobe_what[i];
  for (size_t i = 0; i < uretprobes.size(); ++i) what_by_cookie[uretprobes[i].cookie] = uretprobe_what[i];
  for (const probe::ProbeInfo& pi : pm.list()) {
    auto w = what_by_cookie.find(pi.cookie);
    if (w != what_by_cookie.end() && pi.state == probe::State::int3)
      int3s->push_back(fmt::format("{} at {} ({:#x})", w->second, pi.symbol, pi.addr));
  }
  // Each USDT site's semaphore counts one attachment, as the kernel's uprobe reference
  // counter does: the program's `if (PROVIDER_NAME_ENABLED())` code runs from now on.
  // Raised last, after everything attached (nothing left to undo): before main for a
  // launched run, whose programs stay until the exit; in a running process (run -p)
  // while its threads run, and lowered by bpf_stop at the client's end. The counter is
  // atomic, as a program (or another client) may raise its own.
  for (const uint64_t sem : semaphores) __atomic_fetch_add(reinterpret_cast<uint16_t*>(sem), 1, __ATOMIC_SEQ_CST);
  st->probes = std::move(probes);
  st->semaphores = std::move(semaphores);
  for (auto& r : res) st->links.push_back(*r);
  undo_globals.armed = false;
  st->exe = exe;
  if (!st->objects.empty()) ebpf::write_loaded_ranges(st->objects, loaded_ranges(st->exe));
  if (client == kLaunchClient) g_launch = st.get();
  g_states.push_back(st.release());
  return {};
}

bool bpf_has_library_programs() { return g_launch && !g_launch->lib.empty(); }

void bpf_loader_changed() {
  BpfState* st = g_launch;
  if (st && !st->objects.empty()) ebpf::write_loaded_ranges(st->objects, loaded_ranges(st->exe));
  if (!st || st->lib.empty()) return;
  const std::vector<Loaded> objs = loaded_libraries();
  auto& pm = probe::Manager::instance();
  // Unloaded (dlclose announces after the unmapping): its probes go, their code with it
  // (the probe layer restores nothing in unmapped code), before another object can be
  // mapped there (the loader's lock is held).
  std::vector<probe::Probe*> gone;
  for (LibProbe& l : st->lib) {
    if (l.object.empty()) continue;
    if (std::any_of(objs.begin(), objs.end(), [&](const Loaded& o) { return o.key == l.object; })) continue;
    if (l.probe) gone.push_back(l.probe);
    l.probe = nullptr;
    l.object.clear();
  }
  if (!gone.empty())
    if (auto r = pm.detach_batch(gone); !r)
      fmt::print(stderr, "utramp run: detaching the probes of an unloaded library: {}\n", r.error().message);
  // Loaded (the announcement comes after the mapping, before any of its code runs).
  bool discovered = false;
  for (LibProbe& l : st->lib) {
    if (!l.object.empty()) continue;
    const Loaded* obj = loaded_as(objs, l.lib);
    if (!obj) continue;
    if (!discovered) {
      if (auto n = sites::SiteTable::instance().discover(); !n)
        fmt::print(stderr, "utramp run: {}\n", n.error().message);
      discovered = true;
    }
    // Said once per load: a probe that cannot go in is not tried again until the
    // library is loaded anew.
    auto addr = lib_probe_addr(l, *obj);
    Result<void> r = addr ? attach_lib_probe(l, *obj, *addr) : Result<void>(std::move(addr).error());
    if (!r) {
      fmt::print(stderr, "utramp run: {}\n", r.error().message);
      l.object = obj->key;
    }
  }
}

namespace {
// bpf_start's outcome in cfg.bpf_status_file (bpf.hpp: bpf_start_or_exit).
void write_status(const Config& cfg, const TrustedDir& dir, const Result<void>& r,
                  const std::vector<std::string>& int3s) {
  std::string msg = r ? std::string("ok\n") : "error: " + r.error().message + "\n";
  if (r)
    for (const auto& line : int3s) msg += "int3 " + line + "\n";
  // In the checked directory, created anew, never through a link (load_trusted_config
  // made sure the status file is in it).
  if (!cfg.bpf_status_file.empty())
    if (auto dfd = dir.open_fd()) {
      const std::string name = cfg.bpf_status_file.substr(cfg.bpf_status_file.rfind('/') + 1);
      (void)os::write_file_at(*dfd, dir.path(), name, msg);
      close(*dfd);
    }
}
}  // namespace

void bpf_start_or_exit(const Config& cfg, const TrustedDir& dir) {
  std::vector<std::string> int3s;
  auto r = bpf_start(cfg, dir, &int3s, /*live=*/false, kLaunchClient);
  write_status(cfg, dir, r, int3s);
  if (!r) _exit(125);
}

Result<nlohmann::json> bpf_start_live(const Config& cfg, const TrustedDir& dir, uint64_t client) {
  std::vector<std::string> int3s;
  auto r = bpf_start(cfg, dir, &int3s, /*live=*/true, client);
  write_status(cfg, dir, r, int3s);
  if (!r) return std::move(r).error();
  size_t attached = 0;
  for (const BpfState::Shown& p : g_states.back()->shown) attached += p.attachments;
  return nlohmann::json{{"programs", g_states.back()->shown.size()}, {"attached", attached}, {"int3", int3s}};
}

size_t bpf_stop(uint64_t client, std::vector<std::string>* errors, size_t* links) {
  const auto it = std::find_if(g_states.begin(), g_states.end(), [&](const BpfState* x) { return x->client == client; });
  if (it == g_states.end() || client == kLaunchClient) return 0;
  std::unique_ptr<BpfState> st(*it);
  g_states.erase(it);
  // Its links, together (one patch batch per step); detach_many returns once no thread
  // runs their programs. Those a `detach -p` took already are gone from the manager.
  auto& mgr = tramp::Manager::instance();
  std::vector<tramp::Link*> live;
  for (const tramp::LinkInfo& l : mgr.links())
    if (std::find(st->links.begin(), st->links.end(), l.link) != st->links.end())
      live.push_back(const_cast<tramp::Link*>(l.link));
  const std::vector<Result<void>> done = mgr.detach_many(live);
  for (size_t i = 0; i < done.size(); ++i)
    if (done[i]) ++*links;
    else errors->push_back(fmt::format("an eBPF program's link: {}", done[i].error().message));
  size_t removed = 0;
  if (!st->probes.empty()) {
    if (auto r = probe::Manager::instance().detach_batch(st->probes); r) removed = st->probes.size();
    else errors->push_back("the eBPF programs' probes: " + r.error().message);
  }
  // Lowered as they were raised: the program's `if (PROVIDER_NAME_ENABLED())` code is
  // skipped again unless something else attached there.
  for (const uint64_t sem : st->semaphores) __atomic_fetch_sub(reinterpret_cast<uint16_t*>(sem), 1, __ATOMIC_SEQ_CST);
  if (st->stats) stats_wanted(false);
  if (st->printk) ebpf::set_printk_ring(nullptr);
  // No program of it runs any more, but a thread may still be in an image its links ran
  // in, which counts the run into the map file (AttachOptions::stats_at): the programs'
  // code, the map file's mapping and the rest go once those images are freed.
  free_after_grace(std::move(st));
  return removed;
}

void bpf_forget_links(uint64_t client) {
  for (BpfState* st : g_states)
    if (st->client == client) st->links.clear();
}

void bpf_link_owners(std::map<const void*, uint64_t>* out) {
  for (const BpfState* st : g_states)
    for (const tramp::Link* l : st->links) (*out)[l] = st->client;
}

nlohmann::json bpf_show() {
  using nlohmann::json;
  json out = json::object();
  if (g_states.empty()) return out;
  json progs = json::array(), maps = json::array();
  size_t probes = 0;
  bool stats = false;
  for (const BpfState* st : g_states) {
    for (const BpfState::Shown& p : st->shown) {
      json j{{"name", p.name}, {"section", p.section}, {"type", p.kind}, {"target", p.target},
             {"attached", p.attachments}, {"client", st->client}};
      if (p.stats) {
        j["run_cnt"] = __atomic_load_n(&p.stats->run_cnt, __ATOMIC_RELAXED);
        j["run_ns"] = __atomic_load_n(&p.stats->run_ns, __ATOMIC_RELAXED);
      }
      // The statistics count every miss (the recursion rule's too); without them, the
      // recursion rule's word of `.misses`.
      j["misses"] = p.stats ? __atomic_load_n(&p.stats->misses, __ATOMIC_RELAXED)
                    : p.misses ? __atomic_load_n(p.misses, __ATOMIC_RELAXED)
                               : 0;
      progs.push_back(std::move(j));
    }
    for (size_t i = 0; i < st->maps.count(); ++i) {
      const ebpf::MapSpec s = st->maps.spec(i);
      if (s.name == ebpf::kObjectsMap || s.name == ebpf::kProgStatsMap || s.name == ".misses" ||
          s.name == ".printk")
        continue;  // the CLI's, not the object's
      json m{{"name", s.name}, {"type", std::string(ebpf::map_type_name(s.type))}, {"max_entries", s.max_entries},
             {"client", st->client}};
      if (s.type == uint32_t(ebpf::MapType::hash) || s.type == uint32_t(ebpf::MapType::lru_hash) ||
          s.type == uint32_t(ebpf::MapType::percpu_hash))
        m["entries"] = st->maps.entry_count(i);
      maps.push_back(std::move(m));
    }
    probes += st->probes.size();
    stats = stats || st->stats;
  }
  out["programs"] = std::move(progs);
  out["maps"] = std::move(maps);
  out["probes"] = probes;
  out["stats"] = stats;
  return out;
}

}  // namespace utramp::agent
