// The agent: preloaded into the traced program by `utramp record` (LD_PRELOAD), it reads
// its configuration, discovers and canonicalises the program's sites before main runs,
// attaches the tracer to the selected functions, follows dlopen and fork, and never
// writes to the program's stdout or stderr (its log is DIR/agent-PID.log). It also keeps
// SIGTRAP deliverable (see "SIGTRAP stays deliverable" below).
#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <link.h>
#include <alloca.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/bpf.hpp"
#include "agent/captures.hpp"
#include "agent/config.hpp"
#include "agent/control.hpp"
#include "agent/instrument.hpp"
#include "agent/process_files.hpp"
#include "agent/trust.hpp"
#include "arch/arch.hpp"
#include "common/init.hpp"
#include "ftrace/graph.hpp"
#include "ftrace/libcall.hpp"
#include "os/dwarf.hpp"
#include "os/elf_file.hpp"
#include "os/file.hpp"
#include "os/signal_stack.hpp"
#include "os/text_writer.hpp"
#include "patch/patcher.hpp"
#include "probe/sigtrap_mask.hpp"
#include "sites/imports.hpp"
#include "sites/loader_watch.hpp"
#include "sites/object.hpp"
#include "sites/table.hpp"
#include "symbols/glob.hpp"
#include "trace/shm_buffers.hpp"
#include "tramp/trampoline.hpp"

namespace utramp::agent {

// A running process's signal functions, taken over while an int3 entry may be reached
// (below, "SIGTRAP stays deliverable").
namespace sig {
Result<void> take_over();
void give_back(bool wait_for_traps = true);
bool taken_over();
void child_gives_back();
void child_forgets_lock_holder();
}  // namespace sig

namespace {

inline constexpr uint64_t kNoRecorder = UINT64_MAX;

struct Agent {
  Config cfg;
  TrustedDir dir;  // where cfg came from: the only directory the agent writes into
  // The rings the tracer writes to. Never freed: a configuration sent again to an agent
  // in a running process gets new ones, and the old are retired (ShmBuffers::retire),
  // the tracer's threads possibly still holding them.
  trace::ShmBuffers* buffers = nullptr;
  std::vector<std::unique_ptr<ftrace::FuncRecord>> records;  // cookies: never freed
  ProcessFiles files;  // this process's files in the trace directory
  std::string exe;
  // Loaded into a running process (`utramp record -p`) and configured over the control
  // channel, not started with the program by its launcher.
  bool running_process = false;
  arch::TracerHooks hooks;  // the tracer links' hooks (ftrace::hooks())
  arch::TracerHooks filter_hooks, notrace_hooks;  // those of -F and -N functions (ftrace::scope_hooks)
  // Nothing of utramp's is attached: everything was removed (`utramp detach -p`, or the
  // last client's release) and nothing attached since.
  bool detached = false;
  // Who owns the tracer, whose configuration cfg is: the launcher (kLaunchClient), a
  // `record -p` client (agent/control.hpp), or kNoRecorder. One recording at a time: the
  // tracer has one set of rings and options for every thread of the process.
  uint64_t recorder = kNoRecorder;
  std::vector<tramp::Link*> recording_links;  // the tracer's links (cleared when detached)
  // `utramp run -p` clients side by side (their programs: agent/bpf.cpp), in the order
  // they came, each with its configuration and directory.
  struct RunClient {
    uint64_t id;
    Config cfg;
    TrustedDir dir;
  };
  std::vector<RunClient> run_clients;
  // A client's CLI took SIGTRAP out of threads' masks (Config::sigtrap_unblocked): the
  // program's signal functions stay taken over until the last client has gone, whether or
  // not int3 entries are in place, so that no thread blocks it again through them.
  bool keep_signals = false;
};

Agent* g_agent = nullptr;
// The agent's lock: its state, the site table's changes, the control channel's
// requests. Global, not the agent's: an agent loaded into a running process serves the
// control channel before it has a configuration (and so before g_agent exists).
// Constant-initialised (no constructor runs), so usable from any constructor.
std::recursive_mutex g_mu;

void logf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// The directory the agent's log goes to: the recording's (or the launcher's), else the
// newest `run -p` client's, else the last one the agent had.
const TrustedDir* log_dir() {
  if (!g_agent) return nullptr;
  if (g_agent->recorder == kNoRecorder && g_agent->running_process && !g_agent->run_clients.empty())
    return &g_agent->run_clients.back().dir;
  return g_agent->cfg.trace_dir.empty() ? nullptr : &g_agent->dir;
}

void logf(const char* fmt, ...) {
  const TrustedDir* dir = log_dir();
  if (!dir) return;
  // In the checked directory, appended to only when it is our own file (agent/trust.hpp).
  auto dfd = dir->open_fd();
  if (!dfd) return;
  auto log = os::open_append_at(*dfd, dir->path(), fmt::format("agent-{}.log", getpid()));
  close(*dfd);
  if (!log) return;
  const int fd = *log;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n > 0) {
    if (n > static_cast<int>(sizeof buf) - 2) n = sizeof buf - 2;
    buf[n++] = '\n';
    (void)!write(fd, buf, static_cast<size_t>(n));
  }
  close(fd);
}

void log_error(const Result<void>& r) {
  if (!r) logf("%s", r.error().message.c_str());
}

// Start-up and runtime glue that is in every program and never interesting to trace.
bool noise(const std::string& n) {
  static const char* const kNames[] = {"_start", "_init", "_fini", "frame_dummy",
                                       "register_tm_clones", "deregister_tm_clones",
                                       "__do_global_dtors_aux", "__libc_csu_init",
                                       "__libc_csu_fini", "_dl_relocate_static_pie",
                                       "__gmon_start__"};  // gcrt1 (-pg): before main
  for (const char* k : kNames)
    if (n == k) return true;
  return false;
}

bool own_object(const std::string& path) {
  const std::string base = path.substr(path.rfind('/') + 1);
  return base.starts_with("libutramp");
}

static_assert(sizeof(ftrace::FuncRecord::args) / sizeof(ftrace::FuncRecord::args[0]) == kMaxArgsPerFunction);

// What -A/-R record of the function at SITE (a record with nothing when no capture names
// it), and in *sig the signature its images must use for that: DWARF's when there is
// one, else agent/captures.hpp's registers. A capture the signature cannot place is
// left out and logged (the function has no such argument).
ftrace::FuncRecord* record_for(const symbols::Name& name, const sites::Site& site,
                               std::optional<abi::Signature>* sig) {
  auto rec = std::make_unique<ftrace::FuncRecord>();
  rec->addr = site.info.func;
  std::vector<ArgCapture> args;
  std::optional<ValueSpec> ret;
  for (const auto& c : g_agent->cfg.captures) {
    if (!symbols::glob_matches(c.glob, name)) continue;
    for (const auto& a : c.args)
      if (auto cap = parse_arg_capture(a)) args.push_back(*cap);  // checked by the CLI (agent/config.hpp)
    if (c.retval)
      if (auto f = parse_value_format(c.retfmt)) ret = *f;
  }
  if (!args.empty() || ret) {
    auto d = os::signature_from_dwarf(site.object(), site.info.func - site.bias);
    const bool typed = static_cast<bool>(d);
    *sig = typed ? std::move(*d) : register_signature(ret ? &*ret : nullptr);
    for (const ArgCapture& a : args) {
      if (rec->nargs >= kMaxArgsPerFunction) break;
      if (auto r = resolve_arg(a, **sig, typed, &rec->args[rec->nargs]); r) ++rec->nargs;
      else logf("-A %s: %s", name.full().c_str(), r.error().message.c_str());
    }
    if (ret)
      if (auto r = resolve_ret(*ret, **sig, typed, &rec->ret); !r) {
        rec->ret = {};
        logf("-R %s: %s", name.full().c_str(), r.error().message.c_str());
      }
  }
  g_agent->records.push_back(std::move(rec));
  return g_agent->records.back().get();
}

// Whether the tracer traces the functions of the object at `path`: the program's, and
// a library's when it was built to be traced (compiler sites or -finstrument-functions:
// a -pg plugin opened with dlopen, as uftrace traces it) or with --libs every one.
// Judged once per object from its outline (sites::built_for_tracing); call with
// g_mu held.
bool traced_object(std::string_view path) {
  if (path == g_agent->exe || g_agent->cfg.libraries) return true;
  // Never freed: the agent's state lives as long as the process.
  static auto* judged = new std::map<std::string, bool, std::less<>>();
  if (auto it = judged->find(path); it != judged->end()) return it->second;
  bool yes = false;
  if (path.empty() || path.starts_with("[") || own_object(std::string(path))) {
    yes = false;
  } else if (auto outline = os::read_outline(std::string(path))) {
    yes = sites::built_for_tracing(*outline);
    if (yes) logf("traced: %.*s was built to be traced", static_cast<int>(path.size()), path.data());
  }
  judged->emplace(std::string(path), yes);
  return yes;
}

// Which functions are traced (--only, --skip: not even patched) and which open a scope
// (-F, -N: ftrace::Scope), by their names (symbols/glob.hpp).
struct Selection {
  symbols::Globs only, skip, filters, notrace;
  bool function_graph;
  explicit Selection(const Config& c)
      : only(c.only), skip(c.skip), filters(c.filters), notrace(c.notrace),
        function_graph(c.tracer == "function_graph") {}
  bool traced(const symbols::Name& name) const {
    return !skip.matches(name) && (only.empty() || only.matches(name));
  }
  // -N wins over -F, as in uftrace: nothing is recorded inside such a call. The function
  // tracer has no exits, hence no scopes (the CLI refuses -F/-N with it).
  ftrace::Scope scope(const symbols::Name& name) const {
    if (!function_graph) return ftrace::Scope::none;
    if (notrace.matches(name)) return ftrace::Scope::notrace;
    if (filters.matches(name)) return ftrace::Scope::filter;
    return ftrace::Scope::none;
  }
};

// Selected functions attach_new_sites() could not trace, and the first one's reason:
// what configure_running() tells the CLI (the others are in the agent's log).
struct Untraced {
  size_t count = 0;
  std::string first;
  void add(const std::string& why) {
    if (count++ == 0) first = why;
  }
} g_untraced;

// SIGTRAP back to the program's action (patch::restore_program_trap_action) once no int3
// of utramp's is left: a thread that trapped on one just before it went, and has not
// been handled yet, has the signal pending, and must reach utramp's handler (which
// sends it back to the instruction now there), not the program's action (by default the
// kernel's: a core dump). So first no SIGTRAP pending in any thread, in two looks a few
// milliseconds apart (a thread preempted between its trap and the signal's generation
// is not seen: docs/attach.md, "Limits").
void give_trap_action_back() {
  for (int look = 0, clear = 0; look < 500 && clear < 2; ++look) {
    auto pending = probe::sigtrap_pending();
    if (!pending) break;
    clear = *pending ? 0 : clear + 1;
    timespec ts{0, 2 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
  log_error(patch::restore_program_trap_action());
}

// Attaches the tracer to every selected function not traced yet.
void attach_new_sites() {
  if (g_agent->recorder == kNoRecorder) return;
  auto& table = sites::SiteTable::instance();
  auto& mgr = tramp::Manager::instance();
  const Config& cfg = g_agent->cfg;
  std::vector<tramp::Manager::AttachRequest> reqs;
  // The sites attached, their functions made for the symbol file only once attached
  // (with reqs freed first: its pages then take them).
  std::vector<const sites::Site*> cand;
  std::vector<size_t> first_req{0};  // cand[i]'s requests: [first_req[i], first_req[i+1])
  std::vector<trace::Function> reported;  // functions that report their own calls
  std::vector<Reported> reported_addrs;
  size_t skipped = 0;
  bool wants_int3 = false;  // a selected function's entry would be diverted by an int3
  const Selection sel(cfg);
  // One scan of /proc/self/task for the loop's takes_int3_form(), not one per function
  // (g_mu held, no thread made meanwhile: os/text_writer.hpp).
  auto once = std::make_unique<os::ThreadCountOnce>();
  const auto all = table.all();
  const size_t fresh = static_cast<size_t>(
      std::count_if(all.begin(), all.end(), [](const sites::Site* s) { return !s->traced_by_agent; }));
  reqs.reserve(fresh);
  cand.reserve(fresh);
  first_req.reserve(fresh + 1);
  for (sites::Site* s : all) {
    if (s->traced_by_agent) continue;
    s->traced_by_agent = true;
    if (own_object(s->object())) continue;
    if (!traced_object(s->object())) continue;
    if (noise(s->info.name)) continue;
    const symbols::Name name(s->info.name);
    if (!sel.traced(name)) continue;
    const ftrace::Scope scope = sel.scope(name);
    if (s->reports_calls) {
      // -finstrument-functions: its reports are recorded, no site is patched (a site
      // too would record each call twice). -A/-R need an image's ctx: not recorded.
      reported.push_back({s->info.func, s->info.size, s->info.name, s->object()});
      reported_addrs.push_back({s->info.func, scope});
      continue;
    }
    std::string why;
    if (!s->usable(&why)) {
      ++skipped;
      logf("skipped %s: %s", name.full().c_str(), why.c_str());
      g_untraced.add(why);
      continue;
    }
    std::optional<abi::Signature> sig;
    ftrace::FuncRecord* rec = record_for(name, *s, &sig);
    rec->scope = scope;
    tramp::AttachOptions o;
    o.cookie = reinterpret_cast<uint64_t>(rec);
    o.caller = cfg.tracer == "function";  // graph_entry records who called (ctx[-4])
    if (rec->nargs == 0 && rec->ret.fmt == trace::ValueFormat::none) {
      // Nothing to capture: the tracer's hooks, inlined in the image (no ctx); a function
      // with a scope takes the general code at entry.
      const arch::TracerHooks* h = scope == ftrace::Scope::filter    ? &g_agent->filter_hooks
                                   : scope == ftrace::Scope::notrace ? &g_agent->notrace_hooks
                                                                     : &g_agent->hooks;
      reqs.push_back({s->info.func, tramp::AttachType::tracer, reinterpret_cast<uint64_t>(h), std::move(o)});
    } else {
      if (sig) o.signature = std::make_shared<const abi::Signature>(std::move(*sig));
      reqs.push_back({s->info.func, tramp::AttachType::fentry,
                      reinterpret_cast<uint64_t>(&ftrace::graph_entry), o});
      if (cfg.tracer == "function_graph")
        reqs.push_back({s->info.func, tramp::AttachType::fexit,
                        reinterpret_cast<uint64_t>(&ftrace::graph_exit), o});
    }
    cand.push_back(s);
    first_req.push_back(reqs.size());
    wants_int3 = wants_int3 || table.takes_int3_form(s);
  }
  once.reset();
  if (!reported.empty()) {
    logf("%zu functions report their calls (-finstrument-functions): traced without sites",
         reported.size());
    report_functions(reported_addrs);
  }
  if (reqs.empty()) {
    if (skipped) logf("%zu functions skipped (see above)", skipped);
    if (!reported.empty()) log_error(g_agent->files.traced(std::move(reported)));
    return;
  }
  // In a running process the program's signal functions go through utramp before the
  // first int3 entry is written (the program keeps SIGTRAP deliverable and its own
  // SIGTRAP action, docs/attach.md), and only then; given back if none was written.
  if (g_agent->running_process && wants_int3 && !sig::taken_over())
    if (auto r = sig::take_over(); !r) {
      logf("%s", r.error().message.c_str());
      sites::set_trap_entries(false, r.error().message);
    }
  auto res = mgr.attach_many(reqs);
  if (g_agent->running_process) {
    if (sig::taken_over() && !table.any_int3_entry() && !g_agent->keep_signals) sig::give_back();
    // Without int3 entries SIGTRAP is utramp's only for the patch batches' own int3s:
    // the program's action again between batches (each installs utramp's handler).
    // (Unless a `run -p` client's probes need utramp's handler: they may be int3s.)
    if (!sig::taken_over() && g_agent->run_clients.empty()) give_trap_action_back();
  }
  std::vector<tramp::Manager::AttachRequest>().swap(reqs);
  std::vector<trace::Function> done = std::move(reported);
  done.reserve(done.size() + cand.size());
  for (size_t i = 0; i < cand.size(); ++i) {
    bool ok = true;
    for (size_t k = first_req[i]; k < first_req[i + 1]; ++k)
      if (res[k]) {
        g_agent->recording_links.push_back(*res[k]);
      } else {
        ok = false;
        logf("not traced %s: %s", symbols::demangle(cand[i]->info.name).c_str(),
             res[k].error().message.c_str());
        g_untraced.add(res[k].error().message);
      }
    if (ok) done.push_back({cand[i]->info.func, cand[i]->info.size, cand[i]->info.name, cand[i]->object()});
  }
  logf("traced %zu functions, %zu skipped", done.size(),
       skipped + cand.size() - (done.size() - reported_addrs.size()));
  log_error(g_agent->files.traced(std::move(done)));
}

// Runs on a thread inside the agent (its start-up, the loader's announcement, its
// files at fork and exit); the interposers below pass calls made meanwhile straight
// through (calls of libc made by the libraries the agent uses come back here otherwise,
// see docs/architecture.md), and the tracer records none of them: with `record --libs`
// the library functions the agent calls are traced, and those calls are not the
// program's (ftrace::AtWork).
__attribute__((tls_model("initial-exec"))) thread_local int t_inside = 0;
struct Inside {
  Inside() { ++t_inside; }
  ~Inside() { --t_inside; }
  Inside(const Inside&) = delete;
  Inside& operator=(const Inside&) = delete;
  ftrace::AtWork at_work;
};

// Discovers what was loaded since the last call and traces it. `fresh`: the objects are
// announced by the loader before any of their code ran (sites/loader_watch.hpp), so no
// thread can be inside their sites and every compiler site can be canonicalised.
void discover_and_attach(bool fresh) {
  Inside in;
  std::lock_guard lock(g_mu);
  auto& table = sites::SiteTable::instance();
  // Without --libs only the program's own functions are traced: the libraries are not
  // even analysed (most of the start-up cost otherwise).
  std::function<bool(std::string_view)> want;
  if (!g_agent->cfg.libraries) want = [](std::string_view path) { return traced_object(path); };
  std::vector<std::string> added;
  if (auto r = table.discover(want, &added); !r) logf("discover: %s", r.error().message.c_str());
  if (fresh)
    for (const std::string& path : added) (void)table.canonicalize(sites::Quiescence::stopped, path);
  auto left = table.canonicalize(sites::Quiescence::live);
  if (!left) logf("canonicalize: %s", left.error().message.c_str());
  else if (*left)
    logf("%zu sites left as five 1-byte NOPs: other threads were running (%s)", *left,
         sites::trap_entries() ? "diverted by an int3 when traced" : "not traced");
  attach_new_sites();
  log_error(g_agent->files.write_maps());
}

// The library calls of the objects loaded at start-up (ftrace/libcall.hpp): the
// program's, and with --nest-libcall every library's but utramp's own and the
// loader's. With --libs the library functions themselves are traced instead. Called
// with no utramp lock held: it asks the loader (dl_iterate_phdr, dlsym, dladdr).
void trace_library_calls() {
  const Config& cfg = g_agent->cfg;
  if (!cfg.libcalls || cfg.libraries || cfg.tracer == "none") return;
  Inside in;
  const bool nest = cfg.nest_libcalls;
  auto objects = sites::loaded_imports([nest](std::string_view path) {
    if (path.empty()) return true;  // the main program
    if (!nest) return false;
    const std::string_view base = path.substr(path.rfind('/') + 1);
    return !base.starts_with("libutramp") && !base.starts_with("ld-linux") &&
           !base.starts_with("linux-vdso");
  });
  const Selection sel(cfg);
  std::vector<ftrace::ImportRequest> reqs;
  for (const sites::ObjectImports& o : objects)
    for (const sites::ImportSlot& slot : o.slots) {
      const ftrace::ImportKind kind = ftrace::import_kind(slot.name);
      if (kind == ftrace::ImportKind::untraced || noise(slot.name)) continue;
      // dlopen, dlsym...: from the program's own slots only (ftrace/libcall.hpp).
      if (kind == ftrace::ImportKind::caller && !o.path.empty()) continue;
      const symbols::Name name(slot.name);
      if (!sel.traced(name)) continue;
      ftrace::ImportRequest r;
      r.scope = sel.scope(name);
      r.got = slot.got;
      r.name = slot.name;
      r.lazy = slot.lazy;
      r.relro = o.in_relro(slot.got);
      // The object that defines it: the one the slot's value lies in, or for a slot not
      // bound yet the one the global scope would bind it to now.
      const void* fn = slot.lazy ? dlsym(RTLD_DEFAULT, slot.name.c_str())
                                 : *reinterpret_cast<void* const*>(slot.got);
      // _dl_find_object first: dladdr also looks for the nearest symbol, a walk of the
      // object's symbol table per import (2.5% of `record -- bash -c true`'s CPU). The
      // main program's link map has no name: dladdr says it as the loader was told it.
      dl_find_object found{};
      if (fn && _dl_find_object(const_cast<void*>(fn), &found) == 0 && found.dlfo_link_map &&
          found.dlfo_link_map->l_name && found.dlfo_link_map->l_name[0]) {
        r.library = found.dlfo_link_map->l_name;
      } else {
        Dl_info info{};
        if (fn && dladdr(fn, &info) && info.dli_fname) r.library = info.dli_fname;
      }
      reqs.push_back(std::move(r));
    }
  std::vector<std::string> errors;
  auto done = ftrace::hook_imports(reqs, &errors);
  std::lock_guard lock(g_mu);
  for (const std::string& e : errors) logf("library call not traced: %s", e.c_str());
  logf("traced %zu library calls", done.size());
  log_error(g_agent->files.traced(std::move(done)));
}

// The loader's announcement (sites/loader_watch.hpp), on the thread that loads or
// unloads, with the loader's locks held. A load the agent itself causes (t_inside) is
// picked up by the discovery already under way or the next one.
void on_loader_event(sites::LoaderState state) {
  if (state != sites::LoaderState::consistent || !g_agent || t_inside || g_agent->detached) return;
  if (!g_agent->cfg.bpf_objects.empty()) {  // `utramp run`: programs on libraries
    Inside in;
    bpf_loader_changed();
  }
  if (g_agent->cfg.tracer != "none") discover_and_attach(true);
}

// fork() while another thread is inside the agent: the child must not inherit the
// agent's lock held by a thread it does not have. Taken before the machinery's own
// locks (pthread_atfork runs prepare handlers in reverse order of registration, and the
// runtime registered its handlers at load, before this), as an attach takes them.
void fork_prepare() { g_mu.lock(); }
void fork_parent() { g_mu.unlock(); }

void atfork_child() {
  new (&g_mu) std::recursive_mutex();  // held by the forking thread's parent copy
  control_after_fork_child();
  sig::child_forgets_lock_holder();
  if (!g_agent) return;
  Inside in;
  // The child inherits every image; its threads claim new buffers on their first event.
  ftrace::after_fork_child();
  if (g_agent->running_process) {
    // A recording attached to a running process is the parent's (the child has no
    // control channel, hence no recorder): the child runs as untraced, with the file's
    // bytes at every site, its signal functions, masks and SIGTRAP action its own. It is
    // single-threaded here. (`run -p`'s probes stay, as the kernel's uprobes do; while a
    // `run -p` client is attached, everything stays in the child, a recording's links
    // too: docs/attach.md, "Limits".)
    if (!g_agent->detached && g_agent->run_clients.empty()) {
      g_agent->detached = true;
      sites::SiteTable::instance().put_file_bytes_back_in_child();
      sites::set_trap_entries(false, "a forked child is not recorded");
      sig::child_gives_back();
    }
    return;
  }
  log_error(g_agent->files.forked());
}

// ---- The control channel: `utramp show -p`, `utramp detach -p` ------------------------
//
// agent/control.cpp runs the channel; these answer it, with the agent's lock held.

const char* site_state_name(const sites::Site& s) {
  if (s.applied.op != sites::SiteOp::nop)
    return s.trap_entry ? "int3" : s.applied.op == sites::SiteOp::call ? "call" : "jmp";
  return s.canonical && s.original != std::vector<uint8_t>(arch::kNop5.begin(), arch::kNop5.end()) &&
                 s.info.kind != sites::SiteKind::prologue && s.info.kind != sites::SiteKind::mcount
             ? "nop"
             : "file";
}

nlohmann::json show_json() {
  Inside in;
  using nlohmann::json;
  auto& mgr = tramp::Manager::instance();
  auto& table = sites::SiteTable::instance();
  const bool stats = mgr.stats();
  // Each link's client (agent/control.hpp: 0 the launcher's).
  std::map<const void*, uint64_t> owner;
  bpf_link_owners(&owner);
  if (g_agent)
    for (const tramp::Link* l : g_agent->recording_links) owner[l] = g_agent->recorder;
  std::map<uint64_t, size_t> links_of;  // client -> its links
  json fns = json::array();
  for (const tramp::TrampolineInfo& t : mgr.list()) {
    if (t.links.empty()) continue;  // trampolines are permanent: one with no link is off
    json links = json::array();
    for (const tramp::LinkInfo& l : t.links) {
      json lj = {{"id", l.id}, {"type", std::string(tramp::attach_type_name(l.type))},
                 {"prog", fmt::format("{:#x}", l.prog)}, {"cookie", fmt::format("{:#x}", l.cookie)},
                 {"misses", l.misses}};
      if (auto o = owner.find(l.link); o != owner.end()) {
        lj["client"] = o->second;
        ++links_of[o->second];
      }
      if (stats) {
        lj["run_cnt"] = l.run_cnt;
        lj["run_ns"] = l.run_ns;
      }
      links.push_back(std::move(lj));
    }
    json fj = {{"name", t.function}, {"addr", fmt::format("{:#x}", t.func)}, {"links", std::move(links)}};
    if (const sites::Site* s = table.find(t.func)) {
      fj["object"] = s->object();
      fj["site"] = {{"kind", std::string(sites::site_kind_name(s->info.kind))},
                    {"addr", fmt::format("{:#x}", s->info.site)},
                    {"state", site_state_name(*s)}};
    }
    fns.push_back(std::move(fj));
  }
  size_t nops = 0;  // sites that hold utramp's NOP instead of the file's bytes
  for (const sites::Site* s : table.all())
    if (std::string_view(site_state_name(*s)) == "nop") ++nops;
  static const Config kNone = [] {
    Config c;
    c.tracer = "none";
    return c;
  }();
  const Config& cfg = g_agent && !(g_agent->running_process && g_agent->recorder == kNoRecorder) ? g_agent->cfg : kNone;
  std::string exe = g_agent ? g_agent->exe : std::string();
  if (!g_agent) {
    char buf[4096];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) exe.assign(buf, static_cast<size_t>(n));
  }
  const char* state = !g_agent ? "loaded, not configured" : g_agent->detached ? "detached" : "attached";
  // Each client, with what it made: the launcher's first (while it has anything), then
  // every connection, the asking one included.
  json clients = json::array();
  if (g_agent && !g_agent->running_process && !g_agent->detached)
    clients.push_back({{"id", kLaunchClient}, {"pid", getpid()}, {"launch", true},
                       {"command", cfg.bpf_objects.empty() ? "utramp record (the launcher)" : "utramp run (the launcher)"},
                       {"recording", cfg.tracer == "none" ? std::string() : cfg.trace_dir},
                       {"bpf_objects", cfg.bpf_objects}, {"links", links_of[kLaunchClient]}});
  std::vector<std::string> bpf_objects = cfg.bpf_objects;
  for (json c : control_clients()) {
    const uint64_t id = c.value("id", uint64_t{0});
    if (g_agent && g_agent->recorder == id) c["recording"] = cfg.trace_dir;
    if (g_agent)
      for (const Agent::RunClient& r : g_agent->run_clients)
        if (r.id == id) {
          c["bpf_objects"] = r.cfg.bpf_objects;
          bpf_objects.insert(bpf_objects.end(), r.cfg.bpf_objects.begin(), r.cfg.bpf_objects.end());
        }
    c["links"] = links_of[id];
    clients.push_back(std::move(c));
  }
  const bool running = !g_agent || g_agent->running_process;
  json not_tracked = json::array();
  if (!stats)
    not_tracked.push_back("calls and run time per link: counted only while program statistics are on "
                          "(utramp run --metrics); the tracer's calls are in the trace");
  not_tracked.push_back("events written and lost: counted by the recorder (utramp record's summary), "
                        "not by the agent");
  json shown = {{"pid", getpid()},
          {"exe", exe},
          {"agent",
           {{"state", state},
            {"tracer", cfg.tracer},
            {"started", running ? "loaded into the running process (utramp record -p, run -p)"
                                : "with the program, by its launcher"},
            // What `record -p` reads to refuse a second recording (one at a time).
            {"launched", !running},
            {"recording", g_agent && g_agent->recorder != kNoRecorder},
            {"trace_dir", cfg.trace_dir},
            {"bpf_objects", bpf_objects}}},
          {"functions", std::move(fns)},
          {"sites_as_nop", nops},
          {"library_calls_hooked", ftrace::hooked_imports()},
          {"clients", std::move(clients)},
          // What clients that are gone left until the grace period ends (their programs'
          // code and map files: agent/bpf.cpp, bpf_stop).
          {"awaiting_release", mgr.pending_frees()},
          {"not_tracked", std::move(not_tracked)}};
  // `utramp run`'s programs and maps, as `bpftool prog show` and `map show` list them.
  if (json b = bpf_show(); !b.empty()) shown["bpf"] = std::move(b);
  return shown;
}

// Detaches LINKS together (one patch batch per step for all, not one per link); the
// count detached, what failed in ERRORS.
size_t detach_links(const std::vector<tramp::Link*>& links, std::vector<std::string>* errors) {
  auto& mgr = tramp::Manager::instance();
  const std::vector<Result<void>> done = mgr.detach_many(links);
  size_t n = 0;
  for (size_t i = 0; i < done.size(); ++i) {
    if (done[i]) {
      ++n;
      continue;
    }
    auto l = mgr.link_info(links[i]);  // still live: it was not detached
    errors->push_back(l ? fmt::format("{} link on {}: {}", tramp::attach_type_name(l->type), l->function,
                                      done[i].error().message)
                        : done[i].error().message);
  }
  return n;
}

// What is left once a client's links went: the canonical NOPs no link holds go back to
// the file's bytes (a site another client still patches stays as it is); after the
// recording, int3 entries end (`run -p` never uses them), and only then may the
// program's handlers block SIGTRAP again: a handler that ran during the batches and
// reached one would have been killed.
size_t put_back_unused(bool recording_ended, std::vector<std::string>* left, std::vector<std::string>* errors) {
  size_t restored = 0;
  if (auto r = sites::SiteTable::instance().restore_discovered(left); r) restored = *r;
  else errors->push_back("putting the sites' bytes back: " + r.error().message);
  if (recording_ended)
    sites::set_trap_entries(false, "only a recording attached by record -p diverts entries by an int3");
  // The program's handler masks, its SIGTRAP action (utramp's handler came with the
  // first patch batch) and its signal functions' slots, as they are without utramp, once
  // no client needs utramp's SIGTRAP: the recording's int3 entries are gone, and no
  // `run -p` client is left (its probes may be int3s, and its links' patch batches use
  // them). A takeover made for a recording's int3 entries stays until then, keeping a
  // SIGTRAP action the program sets meanwhile from replacing utramp's handler.
  if (g_agent->running_process && g_agent->run_clients.empty() &&
      (recording_ended || g_agent->recorder == kNoRecorder)) {
    if (sig::taken_over()) sig::give_back();
    else give_trap_action_back();
    g_agent->keep_signals = false;
  }
  return restored;
}

nlohmann::json removal_answer(size_t links, size_t probes, size_t restored, size_t slots,
                              const std::vector<std::string>& left, const std::vector<std::string>& errors) {
  return nlohmann::json{{"links_detached", links}, {"probes_detached", probes}, {"sites_restored", restored},
                        {"library_slots_restored", slots}, {"left", left}, {"errors", errors}};
}

// Everything utramp put in, every client's, removed; the program runs on untraced.
// Tracing stops with it: the events already written are in the shared ring buffers,
// where the recorder takes them (nothing is held back in the agent), and a thread inside
// a traced call when its link goes records that call's exit through the image it entered.
Result<nlohmann::json> detach_all() {
  Inside in;
  using nlohmann::json;
  if (!g_agent || g_agent->detached) {
    json j = removal_answer(0, 0, 0, 0, {}, {});
    j["already_detached"] = true;
    return j;
  }
  g_agent->detached = true;
  std::vector<std::string> left, errors;
  if (auto r = sites::unwatch_loader(); !r) errors.push_back("the loader's r_brk: " + r.error().message);
  size_t links = 0, probes = 0;
  // `utramp run -p` clients: their links, probes, statistics and map files, before the
  // sites go back to the file's bytes.
  for (const Agent::RunClient& c : g_agent->run_clients) probes += bpf_stop(c.id, &errors, &links);
  g_agent->run_clients.clear();
  // Every link left (the recording's, the launcher's programs') in one detach.
  auto& mgr = tramp::Manager::instance();
  std::vector<tramp::Link*> all;
  for (const tramp::LinkInfo& l : mgr.links()) all.push_back(const_cast<tramp::Link*>(l.link));
  links += detach_links(all, &errors);
  g_agent->recording_links.clear();
  g_agent->recorder = kNoRecorder;
  bpf_forget_links(kLaunchClient);
  if (!g_agent->running_process && !g_agent->cfg.bpf_objects.empty())
    left.push_back("the eBPF programs' int3 probes of utramp run stay until the run ends");
  const size_t slots = ftrace::unhook_imports(&errors);
  const size_t restored = put_back_unused(true, &left, &errors);
  // The events written so far are in the rings; what a thread writes from now on (the
  // exit of a call it was inside) is the recorder's to take until it ends.
  logf("detached: %zu links, %zu sites back to the file's bytes, %zu library-call slots; %zu left, "
       "%zu errors",
       links, restored, slots, left.size(), errors.size());
  for (const std::string& e : errors) logf("detach: %s", e.c_str());
  return removal_answer(links, probes, restored, slots, left, errors);
}

// What CLIENT's configuration made (its recording, or its eBPF programs), removed, and
// nothing of another client's: its release, or its connection's end.
Result<nlohmann::json> release_client(uint64_t client) {
  Inside in;
  using nlohmann::json;
  std::vector<std::string> left, errors;
  size_t links = 0, probes = 0;
  bool recording = false, any = false;
  if (g_agent && g_agent->recorder == client && g_agent->running_process) {
    links += detach_links(g_agent->recording_links, &errors);
    g_agent->recording_links.clear();
    g_agent->recorder = kNoRecorder;
    recording = any = true;
  }
  if (g_agent) {
    auto& rc = g_agent->run_clients;
    if (auto it = std::find_if(rc.begin(), rc.end(), [&](const Agent::RunClient& c) { return c.id == client; });
        it != rc.end()) {
      probes += bpf_stop(client, &errors, &links);
      rc.erase(it);
      any = true;
    }
  }
  if (!any) {
    json j = removal_answer(0, 0, 0, 0, {}, {});
    j["already_detached"] = true;
    return j;
  }
  const size_t restored = put_back_unused(recording, &left, &errors);
  if (g_agent->running_process && g_agent->recorder == kNoRecorder && g_agent->run_clients.empty())
    g_agent->detached = true;
  logf("client %llu released: %zu links, %zu probes, %zu sites back to the file's bytes; %zu left, %zu errors",
       static_cast<unsigned long long>(client), links, probes, restored, left.size(), errors.size());
  for (const std::string& e : errors) logf("release: %s", e.c_str());
  return removal_answer(links, probes, restored, 0, left, errors);
}

void control_log(const char* text) { logf("%s", text); }

Result<nlohmann::json> configure_running(TrustedConfig t, uint64_t client);

void start_control_channel() {
  // Its socket, thread and allocations are the agent's calls, not the program's: with
  // --libs they were recorded as the program's first (socket, bind, listen,
  // pthread_create...).
  Inside in;
  ControlHandlers h;
  h.lock = &g_mu;
  h.show = &show_json;
  h.detach = &detach_all;
  h.configure = &configure_running;
  h.release = &release_client;
  h.log = &control_log;
  if (auto r = start_control(h); !r) logf("%s", r.error().message.c_str());
}

// ---- The CPU-time timers stand still while the agent starts ----------------------------
//
// ITIMER_PROF and ITIMER_VIRTUAL count the process's CPU time and survive exec, while a
// SIGPROF or SIGVTALRM handler does not: a `-pg` program's gmon timer (ITIMER_PROF, 10 ms)
// keeps running in the program it execs, which dies of SIGPROF unless it installs a
// handler (a `-pg` one does, in its start-up) before the timer expires. Untraced, what
// runs before that is the program's own start-up; under --follow-exec the loader first
// loads the agent and its libraries, and the agent starts (milliseconds of CPU), and the
// timer expired there: the program died where untraced it lives. So the agent's CPU time
// does not count:
//   - the exec functions (interposed below) stop both timers just before the exec and
//     hand what they had left to the new image in UTRAMP_CPU_TIMERS (added to the
//     environment passed, on the stack: a vfork child may be the caller); an exec that
//     fails sets them again;
//   - in the new image the agent's first constructor takes them from there (and removes
//     the variable), or, in an image started otherwise, stops what is running;
//   - the end of the agent's start-up sets them again with what they had left.
// The program's CPU time counts as untraced; the exec system call's own does not. (A
// program exec'd where the agent does not start, a static or set-user-ID one, keeps them
// stopped. ITIMER_REAL counts wall time, which the agent cannot hide: left alone.)
constexpr const char kCpuTimersVar[] = "UTRAMP_CPU_TIMERS=";
constexpr int kCpuTimers[2] = {ITIMER_PROF, ITIMER_VIRTUAL};

struct StoppedTimers {
  itimerval left[2]{};
  bool armed[2]{};
};
StoppedTimers g_stopped;  // from the first constructor to the end of agent_init

bool running(const itimerval& t) { return t.it_value.tv_sec || t.it_value.tv_usec; }

StoppedTimers stop_cpu_timers_now() {
  StoppedTimers s;
  const itimerval off{};
  for (int i = 0; i < 2; ++i)
    s.armed[i] = getitimer(kCpuTimers[i], &s.left[i]) == 0 && running(s.left[i]) &&
                 setitimer(kCpuTimers[i], &off, nullptr) == 0;
  return s;
}

void restart_cpu_timers(StoppedTimers* s) {
  for (int i = 0; i < 2; ++i)
    if (s->armed[i]) {
      setitimer(kCpuTimers[i], &s->left[i], nullptr);
      s->armed[i] = false;
    }
}

// "UTRAMP_CPU_TIMERS=" then per timer "sec.usec/sec.usec," (left, interval), with no
// allocation and no stdio (a vfork child may be formatting it).
char* put_number(char* p, uint64_t v) {
  char digits[24];
  int n = 0;
  do digits[n++] = static_cast<char>('0' + v % 10); while ((v /= 10) != 0);
  while (n) *p++ = digits[--n];
  return p;
}
void format_cpu_timers(const StoppedTimers& s, char* out) {  // out: 160 bytes
  char* p = out;
  for (char c : std::string_view(kCpuTimersVar)) *p++ = c;
  for (int i = 0; i < 2; ++i) {
    const itimerval& t = s.armed[i] ? s.left[i] : itimerval{};
    p = put_number(p, static_cast<uint64_t>(t.it_value.tv_sec));
    *p++ = '.';
    p = put_number(p, static_cast<uint64_t>(t.it_value.tv_usec));
    *p++ = '/';
    p = put_number(p, static_cast<uint64_t>(t.it_interval.tv_sec));
    *p++ = '.';
    p = put_number(p, static_cast<uint64_t>(t.it_interval.tv_usec));
    *p++ = ',';
  }
  *p = 0;
}
bool parse_cpu_timers(const char* text, StoppedTimers* s) {
  for (int i = 0; i < 2; ++i) {
    unsigned long long v[4];
    int used = 0;
    if (sscanf(text, "%llu.%llu/%llu.%llu,%n", &v[0], &v[1], &v[2], &v[3], &used) != 4 || used == 0 ||
        v[1] >= 1000000 || v[3] >= 1000000)
      return false;
    text += used;
    s->left[i].it_value = {static_cast<time_t>(v[0]), static_cast<suseconds_t>(v[1])};
    s->left[i].it_interval = {static_cast<time_t>(v[2]), static_cast<suseconds_t>(v[3])};
    s->armed[i] = running(s->left[i]);
  }
  return *text == 0;
}

__attribute__((constructor(UTRAMP_INIT_GLUE))) void stop_cpu_timers() {
  if (const char* handed = getenv("UTRAMP_CPU_TIMERS")) {
    StoppedTimers s;
    if (parse_cpu_timers(handed, &s)) g_stopped = s;
    unsetenv("UTRAMP_CPU_TIMERS");  // the program's environment is as it was
    return;
  }
  g_stopped = stop_cpu_timers_now();
}

struct RestartCpuTimers {
  ~RestartCpuTimers() { restart_cpu_timers(&g_stopped); }
};

Result<void> start_tracer();

__attribute__((constructor(UTRAMP_INIT_AGENT))) void agent_init() {
  const RestartCpuTimers restart;  // however start-up ends (UTRAMP_INIT_GLUE stopped them)
  const char* path = getenv("UTRAMP_AGENT");
  if (!path || !*path) {
    // Loaded into a running process (`utramp record -p`: os::inject_library makes one
    // of its threads call dlopen): no configuration yet. The control channel is how it
    // gets one (configure_running); nothing else is done until then.
    pthread_atfork(fork_prepare, fork_parent, atfork_child);
    start_control_channel();
    return;
  }
  // A configuration that cannot be trusted is refused whole: the agent then reads, maps
  // and writes nothing (not even a log: it would go where that file says). The CLI
  // finds no trace of the agent and says why, with the same check (agent/trust.hpp).
  auto cfg = load_trusted_config(path);
  if (!cfg) return;
  g_agent = new Agent();
  g_agent->cfg = std::move(cfg->config);
  g_agent->dir = std::move(cfg->dir);
  pthread_atfork(fork_prepare, fork_parent, atfork_child);
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) g_agent->exe.assign(exe, static_cast<size_t>(n));
  if (!g_agent->cfg.follow_exec) {
    // Programs this one execs are not traced; nor does the program see our variables.
    unsetenv("LD_PRELOAD");
    unsetenv("UTRAMP_AGENT");
  }
  if (!g_agent->cfg.bpf_objects.empty()) {  // `utramp run`
    {
      // Its own allocations and copies are not the program's calls of probed library
      // functions (agent/bpf.cpp, the recursion rule).
      Inside in;
      bpf_start_or_exit(g_agent->cfg, g_agent->dir);
      // Programs on libraries loaded later (dlopen) are attached when the loader says
      // so, and detached when it unloads them.
      if (g_agent->cfg.tracer == "none" && bpf_has_library_programs())
        if (auto w = sites::watch_loader(&on_loader_event); !w)
          fmt::print(stderr, "utramp run: programs on libraries loaded later (dlopen) will not be attached: {}\n",
                     w.error().message);
    }
    if (g_agent->cfg.tracer == "none") {
      start_control_channel();
      return;
    }
  }
  g_agent->recorder = kLaunchClient;
  if (auto r = start_tracer(); !r) {
    logf("%s", r.error().message.c_str());
    return;
  }
  // Registered before the C library registers the dynamic loader's destructor pass (at
  // the start of main's caller): exit() runs its handlers last registered first, so
  // this one runs after the program's exit handlers and every ELF destructor, and the
  // end time it writes comes after the last event of the thread that called exit.
  // Forks inherit it.
  on_exit(
      [](int status, void*) {
        Inside in;
        log_error(g_agent->files.exiting(status));
      },
      nullptr);
  // Before main: normally no other thread exists yet. The loader's announcements are
  // watched first, so that an object loaded meanwhile by another thread is not missed.
  if (auto w = sites::watch_loader(&on_loader_event); !w)
    logf("objects loaded later (dlopen) will not be traced: %s", w.error().message.c_str());
  discover_and_attach(false);
  trace_library_calls();
  // Last: until now the program had one thread, as some of the checks above need
  // (os::thread_count does not count this one while it waits).
  start_control_channel();
}

// Maps the rings cfg names and configures the tracer for them, then writes this
// process's start in the trace directory: what a recording starts with, with the
// program (agent_init) or in a running process (configure_running).
Result<void> start_tracer() {
  // The ring buffers are outside the trace directory (/dev/shm): mapped only when they
  // are the user's own file, reached without a symbolic link.
  auto shm = open_own_shared_file(g_agent->cfg.shm_path);
  if (!shm) return make_error(shm.error().code, "cannot map the trace buffers: " + shm.error().message);
  auto buffers = trace::ShmBuffers::attach(fmt::format("/proc/self/fd/{}", *shm));
  close(*shm);
  if (!buffers)
    return make_error(buffers.error().code, "cannot map the trace buffers: " + buffers.error().message);
  g_agent->buffers = new trace::ShmBuffers(std::move(*buffers));
  ftrace::Options o;
  o.tracer = g_agent->cfg.tracer == "function" ? ftrace::Tracer::function : ftrace::Tracer::function_graph;
  o.max_depth = g_agent->cfg.max_depth;
  o.min_duration_ns = g_agent->cfg.min_duration_ns;
  o.ticks_per_ns = g_agent->cfg.ticks_per_ns;
  o.tids = g_agent->cfg.tids;
  o.filter_scopes = !g_agent->cfg.filters.empty() && o.tracer == ftrace::Tracer::function_graph;
  ftrace::configure(g_agent->buffers, o);
  g_agent->hooks = ftrace::hooks();
  g_agent->filter_hooks = ftrace::scope_hooks(ftrace::Scope::filter);
  g_agent->notrace_hooks = ftrace::scope_hooks(ftrace::Scope::notrace);
  tramp::set_unwind_hook(&ftrace::on_unwind);
  log_error(g_agent->files.started(&g_agent->dir));
  return {};
}

// `utramp record -p`: a configuration sent over the control channel (already trusted:
// agent/trust.hpp) to an agent loaded into a running process, with g_mu held, on the
// control thread. Tracing starts with the live patch protocol: the program's threads
// run on while their sites are canonicalised and attached (docs/sites.md); nothing
// stops them. Taken again after a detach (the next `record -p`): new rings, a new trace
// directory, the same sites.
//
// What a running process does not get (docs/attach.md, "Limits"): library calls
// (GOT hooks) and objects loaded later (the loader's hook), whose changes are made
// safely only before main or with the loader's locks, which this thread cannot take
// without risking a deadlock with a program thread inside dlopen.
Result<nlohmann::json> configure_running(TrustedConfig t, uint64_t client) {
  const bool bpf = !t.config.bpf_objects.empty();
  if (bpf != (t.config.tracer == "none"))
    return make_error(Errc::invalid_argument, bpf ? "eBPF programs come without a tracer (utramp run -p)"
                                                  : "a configuration with neither a tracer nor eBPF programs");
  // One recording at a time: the tracer has one set of rings and one set of options for
  // every thread; a second would need a tracer state per recording. eBPF programs
  // (`run -p`) run beside a recording and beside each other.
  if (!bpf && g_agent && !g_agent->running_process)
    return make_error(Errc::busy,
                      "this process was started under utramp (its agent was configured by its "
                      "launcher, utramp record or utramp run): a second recording cannot be "
                      "attached to it; `utramp run -p`, `utramp show -p` and `utramp detach -p` work on it");
  if (!bpf && g_agent && g_agent->recorder != kNoRecorder)
    return make_error(Errc::busy,
                      fmt::format("a recording (utramp record -p) is already attached to this process "
                                  "(trace directory {}): one recording at a time, the tracer has one set of "
                                  "rings and options for every thread; `utramp run -p` works beside it",
                                  g_agent->cfg.trace_dir));
  Inside in;
  // Every change below is made by patch batches, whose int3s a thread that keeps SIGTRAP
  // blocked must not reach: the kernel would end the process (docs/sites.md, "A thread
  // that blocks SIGTRAP unseen"). The CLI takes SIGTRAP out of such threads' masks before
  // it configures (os::unblock_signal); one that still keeps it blocked (it blocks it
  // again by the raw system call) refuses the configuration, nothing changed.
  if (auto blocking = probe::threads_keeping_sigtrap_blocked(); !blocking) {
    return make_error(blocking.error().code, "reading the threads' signal masks: " + blocking.error().message);
  } else if (!blocking->empty()) {
    return make_error(Errc::unsupported,
                      fmt::format("{} keeps SIGTRAP blocked: a thread that reaches one of the int3s a patch "
                                  "batch writes while SIGTRAP is blocked is ended with the whole process by the "
                                  "kernel, so nothing is patched while it does; nothing was changed",
                                  probe::describe(*blocking)));
  }
  if (!g_agent) {
    g_agent = new Agent();
    g_agent->running_process = true;
    g_agent->cfg.tracer = "none";
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) g_agent->exe.assign(exe, static_cast<size_t>(n));
  }
  // Threads the CLI unblocked SIGTRAP in must not block it again while a client is
  // attached: the signal functions are taken over now, before the first batch.
  if (t.config.sigtrap_unblocked) {
    if (!sig::taken_over())
      if (auto r = sig::take_over(); !r) logf("%s", r.error().message.c_str());
    g_agent->keep_signals = sig::taken_over();
  }
  // A configuration refused below leaves no client: the signal functions go back then.
  auto unkeep = [] {
    if (!g_agent->keep_signals || !g_agent->run_clients.empty() || g_agent->recorder != kNoRecorder) return;
    if (!sites::SiteTable::instance().any_int3_entry()) sig::give_back();
    g_agent->keep_signals = false;
  };
  if (bpf) {
    // `utramp run -p`: loaded, verified, JIT-ed and attached here, while the threads run.
    // No int3 entries for its programs (a recording beside it keeps its own): its
    // refusals stand.
    const bool traps = sites::trap_entries();
    sites::set_trap_entries(false, "utramp run -p does not divert entries by an int3");
    auto r = bpf_start_live(t.config, t.dir, client);
    if (traps) sites::set_trap_entries(true);
    if (!r) {
      // Nothing attached (bpf_start undoes its own); the sites it made canonical get the
      // file's bytes back: a refusal changes nothing.
      std::vector<std::string> left;
      (void)sites::SiteTable::instance().restore_discovered(&left);
      unkeep();
      logf("utramp run -p refused: %s", r.error().message.c_str());
      return r.error();
    }
    std::map<const void*, uint64_t> owner;
    bpf_link_owners(&owner);
    (*r)["links"] = std::count_if(owner.begin(), owner.end(), [&](const auto& o) { return o.second == client; });
    (*r)["pid"] = getpid();
    (*r)["client"] = client;
    g_agent->run_clients.push_back({client, std::move(t.config), std::move(t.dir)});
    g_agent->detached = false;
    logf("configured by the control channel (client %llu): eBPF programs, %s",
         static_cast<unsigned long long>(client), r->dump().c_str());
    return *r;
  }
  if (g_agent->buffers) g_agent->buffers->retire();  // the recording before: its recorder is gone
  g_agent->files = ProcessFiles();
  g_agent->cfg = std::move(t.config);
  g_agent->dir = std::move(t.dir);
  g_agent->recorder = client;
  g_agent->detached = false;
  if (auto r = start_tracer(); !r) {
    g_agent->recorder = kNoRecorder;  // nothing attached: the next configuration may try again
    if (g_agent->run_clients.empty()) g_agent->detached = true;
    unkeep();
    return r.error();
  }
  // Functions whose site cannot change while the threads run (five 1-byte NOPs, a
  // relocated prologue whose first instruction is shorter than a jump) get their entry
  // diverted by an int3 (sites::set_trap_entries): no thread keeps SIGTRAP blocked, the
  // look above said (one that blocks it from here on unseen is a limit: docs/sites.md,
  // "A thread that blocks SIGTRAP unseen").
  sites::set_trap_entries(true);  // the signal functions taken over first (attach_new_sites)
  // Sites restored by the last detach are canonicalised and attached again.
  for (sites::Site* s : sites::SiteTable::instance().all()) s->traced_by_agent = false;
  g_untraced = {};
  discover_and_attach(false);
  const size_t links = g_agent->recording_links.size();
  logf("configured by the control channel (client %llu): %zu links, trace directory %s",
       static_cast<unsigned long long>(client), links, g_agent->cfg.trace_dir.c_str());
  return nlohmann::json{{"links", links}, {"pid", getpid()}, {"client", client}, {"not_traced", g_untraced.count},
                        {"not_traced_first", g_untraced.first}};
}

__attribute__((destructor)) void agent_fini() {
  if (g_agent) ftrace::close_thread();
}

}  // namespace

// ---- SIGTRAP stays deliverable ----------------------------------------------------------
//
// The patcher's int3s (during a batch) and int3 probes reach utramp as SIGTRAP. A trap
// raised by the CPU while SIGTRAP is blocked is forced by the kernel: the signal is
// unblocked, its action reset to the default, and the process dumps core. So in a traced
// process SIGTRAP is never blocked:
//   - sigprocmask and pthread_sigmask pass the program's set on without SIGTRAP; the old
//     set still shows SIGTRAP when the program had asked for it blocked (per thread; a new
//     thread starts as not having asked);
//   - sigaction drops SIGTRAP from every handler's sa_mask (it would be blocked while the
//     handler runs; the old action shows it again where the program had put it), and
//     sigaction/signal for SIGTRAP itself go to patch::set_program_trap_action: the
//     program's handler becomes the one the patcher's handler forwards foreign traps to,
//     instead of replacing it, and the program reads back its own;
//   - at start-up, a SIGTRAP blocked across exec is unblocked.
// Calls made by utramp's own objects (the patcher installs its handler and, to dump core
// on a foreign trap, blocks SIGTRAP) pass through untouched, as do the program's calls
// before the agent is set up and after it declined to run. The real functions are
// resolved in a constructor that runs before any other of ours; after it, the
// interposers are async-signal-safe: no allocation, an initial-exec thread-local, and a
// signal's action changed under a spin lock with the signals blocked (ActionLock).
//
// A launched program's calls reach them by interposition (LD_PRELOAD). A running
// process's cannot (its objects are bound already): while an int3 entry may be reached
// there, the GOT slots of these functions in every loaded object are pointed at the
// same code (take_over, the slots found as the library-call tracer finds them:
// sites/imports.hpp), and put back at the detach (give_back), with the handler masks and
// the program's own SIGTRAP action. Objects loaded after that call the real functions.
namespace sig {

using MaskFn = int (*)(int, const sigset_t*, sigset_t*);
using ActionFn = int (*)(int, const struct sigaction*, struct sigaction*);
using SignalFn = sighandler_t (*)(int, sighandler_t);
using AltStackFn = int (*)(const stack_t*, stack_t*);

MaskFn g_sigprocmask = nullptr, g_pthread_sigmask = nullptr;
ActionFn g_sigaction = nullptr;
SignalFn g_signal = nullptr;
AltStackFn g_sigaltstack = nullptr;
// Launched: set once, before main. In a running process: while its signal functions
// are taken over.
std::atomic<bool> g_active{false};

// The executable text of libutramp*.so: calls from there are utramp's own.
struct Range {
  uintptr_t lo, hi;
};
Range g_own[8];
int g_own_count = 0;

// Whether this thread's program asked for SIGTRAP blocked (what the old set reports).
__attribute__((tls_model("initial-exec"))) thread_local bool t_asked_blocked = false;

// Signals whose action the program set with SIGTRAP in its mask, which the kernel holds
// without it: what the old action shows, and what give_back puts back.
std::atomic<bool> g_mask_had_trap[NSIG];

// Serialises changes of a signal's action between the program's threads and the agent
// (read, change, write: the scrub and its undoing). Every signal is blocked while it is
// held but SIGTRAP and the faults (an int3 entry in a function the holder calls must
// still be handled); a SIGTRAP handler that calls sigaction on the holding thread goes on
// (the owner is the thread).
std::atomic<long> g_action_owner{0};
class ActionLock {
 public:
  ActionLock() {
    sigset_t all;
    sigfillset(&all);
    for (int s : {SIGTRAP, SIGSEGV, SIGBUS, SIGILL, SIGFPE}) sigdelset(&all, s);
    g_pthread_sigmask(SIG_BLOCK, &all, &saved_);
    const long me = syscall(SYS_gettid);
    if (g_action_owner.load(std::memory_order_acquire) == me) return;
    for (long none = 0; !g_action_owner.compare_exchange_weak(none, me, std::memory_order_acquire); none = 0)
      sched_yield();
    taken_ = true;
  }
  ~ActionLock() {
    if (taken_) g_action_owner.store(0, std::memory_order_release);
    g_pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }
  ActionLock(const ActionLock&) = delete;
  ActionLock& operator=(const ActionLock&) = delete;

 private:
  sigset_t saved_;
  bool taken_ = false;
};

// A call the agent makes, directly or through a library it uses (libdw, libelf, the C++
// runtime), on a thread inside it.
bool own_caller(const void* ret) {
  if (t_inside) return true;
  const auto a = reinterpret_cast<uintptr_t>(ret);
  for (int i = 0; i < g_own_count; ++i)
    if (a >= g_own[i].lo && a < g_own[i].hi) return true;
  return false;
}

int add_own_ranges(dl_phdr_info* info, size_t, void*) {
  const char* name = info->dlpi_name ? info->dlpi_name : "";
  const char* slash = strrchr(name, '/');
  if (strncmp(slash ? slash + 1 : name, "libutramp", 9) != 0) return 0;
  for (int i = 0; i < info->dlpi_phnum && g_own_count < 8; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
      g_own[g_own_count++] = {info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz};
  }
  return 0;
}

template <class Fn>
Fn next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

// Before any other constructor of ours (common/init.hpp), and on first use if a
// constructor of another object calls one of them earlier.
void resolve() {
  if (g_sigaction) return;
  g_sigprocmask = next<MaskFn>("sigprocmask");
  g_pthread_sigmask = next<MaskFn>("pthread_sigmask");
  g_signal = next<SignalFn>("signal");
  g_sigaltstack = next<AltStackFn>("sigaltstack");
  g_sigaction = next<ActionFn>("sigaction");
}

__attribute__((constructor(UTRAMP_INIT_GLUE))) void init() {
  resolve();
  const char* cfg = getenv("UTRAMP_AGENT");
  if (!cfg || !*cfg) return;
  dl_iterate_phdr(add_own_ranges, nullptr);
  sigset_t trap, old;
  sigemptyset(&trap);
  sigaddset(&trap, SIGTRAP);
  if (g_pthread_sigmask(SIG_UNBLOCK, &trap, &old) == 0 && sigismember(&old, SIGTRAP) == 1)
    t_asked_blocked = true;
  g_active.store(true, std::memory_order_release);
}

bool active() { return g_active.load(std::memory_order_acquire); }

// sigprocmask and pthread_sigmask for the program: REAL with SIGTRAP out of SET.
int mask(MaskFn real, int how, const sigset_t* set, sigset_t* old) {
  const bool asked = t_asked_blocked;
  bool now_asked = asked;
  sigset_t without;
  if (set) {
    const bool has = sigismember(set, SIGTRAP) == 1;
    if (how == SIG_BLOCK) now_asked = asked || has;
    else if (how == SIG_UNBLOCK) now_asked = asked && !has;
    else if (how == SIG_SETMASK) now_asked = has;
    if (has && how != SIG_UNBLOCK) {
      without = *set;
      sigdelset(&without, SIGTRAP);
      set = &without;
    }
  }
  const int r = real(how, set, old);  // 0 on success for both
  if (r == 0) {
    if (old && asked) sigaddset(old, SIGTRAP);
    t_asked_blocked = now_asked;
  }
  return r;
}

// The interposed sigprocmask/pthread_sigmask, called from CALLER.
int mask_for(MaskFn* real, int how, const sigset_t* set, sigset_t* old, const void* caller) {
  resolve();
  if (!active() || own_caller(caller)) return (*real)(how, set, old);
  return mask(*real, how, set, old);
}

bool valid(int signo) { return signo > 0 && signo < NSIG; }

// sigaction for the program: SIGTRAP out of the handler's mask; SIGTRAP's own through
// the patcher. With ACTIVE false (being given back) the real one, remembering that the
// kernel holds what the program asked for.
int action(int signo, const struct sigaction* act, struct sigaction* old, bool active = true) {
  ActionLock lock;
  const bool had = valid(signo) && g_mask_had_trap[signo].load(std::memory_order_relaxed);
  const bool has = act && sigismember(&act->sa_mask, SIGTRAP) == 1;
  int r = 0;
  if (!active) {
    r = g_sigaction(signo, act, old);
  } else {
    struct sigaction copy;
    if (has) {
      copy = *act;
      sigdelset(&copy.sa_mask, SIGTRAP);
      act = &copy;
    }
    if (signo != SIGTRAP) {
      r = g_sigaction(signo, act, old);
    } else if (!patch::set_program_trap_action(act, old)) {
      errno = EINVAL;
      r = -1;
    }
  }
  if (r == 0 && valid(signo)) {
    if (old && had) sigaddset(&old->sa_mask, SIGTRAP);
    if (act) g_mask_had_trap[signo].store(active && has, std::memory_order_relaxed);
  }
  return r;
}

// signal() for the program. glibc's calls its internal sigaction, not the interposed
// one. As glibc's, system calls are restarted (SIGTRAP itself is never added to its
// handler's mask).
// The real signal() under the lock: the new handler's mask has no SIGTRAP to put back.
sighandler_t real_signal(int signo, sighandler_t handler) {
  ActionLock lock;
  const sighandler_t r = g_signal(signo, handler);
  if (r != SIG_ERR && valid(signo)) g_mask_had_trap[signo].store(false, std::memory_order_relaxed);
  return r;
}

sighandler_t signal_for(int signo, sighandler_t handler) {
  if (signo != SIGTRAP) return real_signal(signo, handler);
  struct sigaction act, old;
  memset(&act, 0, sizeof act);
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  act.sa_flags = SA_RESTART;
  if (action(signo, &act, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}

// ---- A running process's GOT slots ----

// What the slots point at while taken over: the program's calls, as the interposers
// take them (the libraries the agent uses call them too, inside it: passed on).
int hooked_sigaction(int signo, const struct sigaction* act, struct sigaction* old) {
  if (t_inside) return g_sigaction(signo, act, old);
  return action(signo, act, old, active());
}
sighandler_t hooked_signal(int signo, sighandler_t handler) {
  if (t_inside) return g_signal(signo, handler);
  if (!active()) return real_signal(signo, handler);  // being given back
  return signal_for(signo, handler);
}
int hooked_sigprocmask(int how, const sigset_t* set, sigset_t* old) {
  if (t_inside || !active()) return g_sigprocmask(how, set, old);
  return mask(g_sigprocmask, how, set, old);
}
int hooked_pthread_sigmask(int how, const sigset_t* set, sigset_t* old) {
  if (t_inside || !active()) return g_pthread_sigmask(how, set, old);
  return mask(g_pthread_sigmask, how, set, old);
}

struct HookedSlot {
  uint64_t got, was, now;
  bool relro;
};
std::vector<HookedSlot>* g_slots = nullptr;  // never freed; agent's lock
bool g_taken = false;                        // agent's lock

bool write_slot(uint64_t got, uint64_t expected, uint64_t value, bool relro) {
  auto w = os::replace_word(got, expected, value, relro);
  return w && *w;
}

size_t hook_slots() {
  static const std::pair<const char*, uint64_t> kOurs[] = {
      {"sigaction", reinterpret_cast<uint64_t>(&hooked_sigaction)},
      {"signal", reinterpret_cast<uint64_t>(&hooked_signal)},
      {"sigprocmask", reinterpret_cast<uint64_t>(&hooked_sigprocmask)},
      {"pthread_sigmask", reinterpret_cast<uint64_t>(&hooked_pthread_sigmask)}};
  if (!g_slots) g_slots = new std::vector<HookedSlot>();
  // Every object but utramp's own and the loader's (whose calls are the C library's).
  auto objects = sites::loaded_imports([](std::string_view path) {
    const std::string_view base = path.substr(path.rfind('/') + 1);
    return !base.starts_with("libutramp") && !base.starts_with("ld-linux") && !base.starts_with("linux-vdso");
  });
  for (const sites::ObjectImports& o : objects)
    for (const sites::ImportSlot& slot : o.slots)
      for (const auto& [name, ours] : kOurs) {
        if (slot.name != name) continue;
        const uint64_t was = __atomic_load_n(reinterpret_cast<uint64_t*>(slot.got), __ATOMIC_ACQUIRE);
        const bool relro = o.in_relro(slot.got);
        if (write_slot(slot.got, was, ours, relro)) g_slots->push_back({slot.got, was, ours, relro});
        else logf("%s: GOT slot %#lx of %s could not be written", name, static_cast<unsigned long>(slot.got),
                  o.path.empty() ? "the program" : o.path.c_str());
      }
  return g_slots->size();
}

// Handlers of the program whose mask blocks SIGTRAP while they run (a sigfillset mask is
// common): a function with an int3 entry that one calls would trap with SIGTRAP blocked,
// and the kernel ends the process for that. SIGTRAP is taken out of their masks, as the
// interposed sigaction does for every handler, and put back by give_back.
void let_handlers_take_sigtrap() {
  for (int signo = 1; signo < NSIG; ++signo) {
    if (signo == SIGKILL || signo == SIGSTOP || signo == SIGTRAP) continue;  // SIGTRAP: utramp's
    ActionLock lock;
    struct sigaction a;
    if (g_sigaction(signo, nullptr, &a) != 0 || !sigismember(&a.sa_mask, SIGTRAP)) continue;
    if (!(a.sa_flags & SA_SIGINFO) && (a.sa_handler == SIG_DFL || a.sa_handler == SIG_IGN)) continue;
    sigdelset(&a.sa_mask, SIGTRAP);
    if (g_sigaction(signo, &a, nullptr) != 0) continue;
    g_mask_had_trap[signo].store(true, std::memory_order_relaxed);
    logf("signal %d: its handler no longer blocks SIGTRAP while it runs, until the detach", signo);
  }
}

void put_handler_masks_back() {
  for (int signo = 1; signo < NSIG; ++signo) {
    ActionLock lock;
    if (!g_mask_had_trap[signo].exchange(false, std::memory_order_relaxed)) continue;
    struct sigaction a;
    if (g_sigaction(signo, nullptr, &a) != 0) continue;
    sigaddset(&a.sa_mask, SIGTRAP);
    (void)g_sigaction(signo, &a, nullptr);
  }
}

// Agent's lock held.
Result<void> take_over() {
  if (g_taken) return {};
  resolve();
  if (!g_sigaction || !g_signal || !g_sigprocmask || !g_pthread_sigmask)
    return make_error(Errc::unsupported, "the C library's signal functions were not found: no entry is diverted by an int3");
  // utramp's own calls of them (the patcher's) may reach the interposers below.
  static const bool own_known = (dl_iterate_phdr(add_own_ranges, nullptr), true);
  (void)own_known;
  g_active.store(true, std::memory_order_release);
  const size_t slots = hook_slots();
  g_taken = true;
  // After the slots: a SIGTRAP action the program sets from now on is passed to ours.
  if (auto r = patch::install_trap_handler(); !r) {
    give_back();
    return make_error(r.error().code, "SIGTRAP: " + r.error().message + ": no entry is diverted by an int3");
  }
  let_handlers_take_sigtrap();
  logf("int3 entries: the program's sigaction, signal, sigprocmask and pthread_sigmask go through utramp "
       "(%zu GOT slots) until the detach", slots);
  return {};
}

bool taken_over() { return g_taken; }

// Agent's lock held; no int3 entry left. WAIT_FOR_TRAPS: other threads may have one of
// utramp's traps pending (not in a forked child: pending signals are not inherited).
void give_back(bool wait_for_traps) {
  if (!g_taken) return;
  g_active.store(false, std::memory_order_release);
  put_handler_masks_back();
  if (wait_for_traps) give_trap_action_back();
  else log_error(patch::restore_program_trap_action());
  for (const HookedSlot& h : *g_slots)
    if (!write_slot(h.got, h.now, h.was, h.relro))
      logf("GOT slot %#lx: changed since it was hooked, left as it is", static_cast<unsigned long>(h.got));
  g_slots->clear();
  g_taken = false;
}

// In a forked child: the lock's holder may be a thread the child does not have.
void child_forgets_lock_holder() { g_action_owner.store(0, std::memory_order_relaxed); }

// In a forked child that is not traced (atfork_child: single-threaded, its sites back
// to the file's bytes already), with the forking thread's own mask.
void child_gives_back() {
  if (!g_taken) {
    (void)patch::restore_program_trap_action();
    return;
  }
  give_back(false);
  if (t_asked_blocked) {
    sigset_t trap;
    sigemptyset(&trap);
    sigaddset(&trap, SIGTRAP);
    g_pthread_sigmask(SIG_BLOCK, &trap, nullptr);
    t_asked_blocked = false;
  }
}

}  // namespace sig

}  // namespace utramp::agent

// Interposed: SIGTRAP stays deliverable (see above).
extern "C" {

int sigprocmask(int how, const sigset_t* set, sigset_t* old) {
  return utramp::agent::sig::mask_for(&utramp::agent::sig::g_sigprocmask, how, set, old,
                                      __builtin_return_address(0));
}

int pthread_sigmask(int how, const sigset_t* set, sigset_t* old) {
  return utramp::agent::sig::mask_for(&utramp::agent::sig::g_pthread_sigmask, how, set, old,
                                      __builtin_return_address(0));
}

int sigaction(int signo, const struct sigaction* act, struct sigaction* old) {
  namespace sig = utramp::agent::sig;
  sig::resolve();
  if (!sig::active() || sig::own_caller(__builtin_return_address(0)))
    return sig::g_sigaction(signo, act, old);
  return sig::action(signo, act, old);
}

sighandler_t signal(int signo, sighandler_t handler) {
  namespace sig = utramp::agent::sig;
  sig::resolve();
  if (!sig::active() || sig::own_caller(__builtin_return_address(0))) return sig::g_signal(signo, handler);
  return sig::signal_for(signo, handler);
}

}  // extern "C"

// Interposed: forks are recorded; the signal stack is learnt.
extern "C" {

// The tracer and the trampolines keep each thread's signal stack (os/signal_stack.hpp)
// instead of asking the kernel where they must tell a signal handler from a longjmp.
int sigaltstack(const stack_t* ss, stack_t* old) {
  namespace sig = utramp::agent::sig;
  sig::resolve();
  const int r = sig::g_sigaltstack(ss, old);
  if (r == 0 && ss) utramp::os::note_signal_stack(*ss);
  return r;
}

pid_t fork(void) {
  using Fn = pid_t (*)();
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "fork"));
  const pid_t pid = real();
  if (pid > 0 && utramp::agent::g_agent) utramp::ftrace::record_fork(static_cast<uint32_t>(pid));
  return pid;
}

}  // extern "C"

// Interposed: the exec functions stop the CPU-time timers for the agent's start-up in
// the new image ("The CPU-time timers stand still", above). Every exec function the C
// library exports comes here (the library's own calls of its execve, in execl or
// execvp, do not go through the PLT); processes made by posix_spawn, system or popen
// are new processes, which start with no timer.
namespace utramp::agent::exec {
namespace {

using ExecveFn = int (*)(const char*, char* const[], char* const[]);
using FexecveFn = int (*)(int, char* const[], char* const[]);
ExecveFn g_execve, g_execvpe;
FexecveFn g_fexecve;

// Resolved at load, never in the exec path (a vfork child may be calling it).
__attribute__((constructor(UTRAMP_INIT_GLUE))) void resolve_exec() {
  g_execve = reinterpret_cast<ExecveFn>(dlsym(RTLD_NEXT, "execve"));
  g_execvpe = reinterpret_cast<ExecveFn>(dlsym(RTLD_NEXT, "execvpe"));
  g_fexecve = reinterpret_cast<FexecveFn>(dlsym(RTLD_NEXT, "fexecve"));
}

// Calls EXEC with ENVP and UTRAMP_CPU_TIMERS added when the timers run and the new
// image will start the agent (--follow-exec: without it the agent removed itself from
// the environment and the new image runs untraced, timers and all).
template <class Exec>
int with_timers_handed(char* const envp[], Exec exec) {
  if (!g_agent || !g_agent->cfg.follow_exec) return exec(envp);
  StoppedTimers stopped = stop_cpu_timers_now();
  if (!stopped.armed[0] && !stopped.armed[1]) return exec(envp);
  char var[160];
  format_cpu_timers(stopped, var);
  size_t n = 0;
  while (envp && envp[n]) ++n;
  char** env = static_cast<char**>(alloca((n + 2) * sizeof(char*)));
  size_t k = 0;
  for (size_t i = 0; i < n; ++i)
    if (strncmp(envp[i], kCpuTimersVar, sizeof kCpuTimersVar - 1) != 0) env[k++] = envp[i];
  env[k++] = var;
  env[k] = nullptr;
  const int r = exec(env);
  const int err = errno;  // the exec failed: the timers run on in this image
  restart_cpu_timers(&stopped);
  errno = err;
  return r;
}

// execl's arguments (FIRST, then up to a null pointer) as an argv on the stack; with
// ENVP_OUT (execle), the environment after the null pointer.
#define UTRAMP_COLLECT_ARGS(first, argv, envp_out)                        \
  size_t count = 1;                                                       \
  {                                                                       \
    va_list ap;                                                           \
    va_start(ap, first);                                                  \
    while (va_arg(ap, char*)) ++count;                                    \
    va_end(ap);                                                           \
  }                                                                       \
  char** argv = static_cast<char**>(alloca((count + 1) * sizeof(char*))); \
  {                                                                       \
    va_list ap;                                                           \
    va_start(ap, first);                                                  \
    argv[0] = const_cast<char*>(first);                                   \
    for (size_t i = 1; i <= count; ++i) argv[i] = va_arg(ap, char*);      \
    if (envp_out) *envp_out = va_arg(ap, char* const*);                   \
    va_end(ap);                                                           \
  }

}  // namespace
}  // namespace utramp::agent::exec

extern "C" {

int execve(const char* path, char* const argv[], char* const envp[]) {
  using namespace utramp::agent::exec;
  return with_timers_handed(envp, [&](char* const* env) { return g_execve(path, argv, env); });
}

int execvpe(const char* file, char* const argv[], char* const envp[]) {
  using namespace utramp::agent::exec;
  return with_timers_handed(envp, [&](char* const* env) { return g_execvpe(file, argv, env); });
}

int fexecve(int fd, char* const argv[], char* const envp[]) {
  using namespace utramp::agent::exec;
  return with_timers_handed(envp, [&](char* const* env) { return g_fexecve(fd, argv, env); });
}

int execv(const char* path, char* const argv[]) { return execve(path, argv, environ); }

int execvp(const char* file, char* const argv[]) { return execvpe(file, argv, environ); }

int execl(const char* path, const char* arg, ...) {
  char* const** no_env = nullptr;
  UTRAMP_COLLECT_ARGS(arg, argv, no_env);
  return execve(path, argv, environ);
}

int execlp(const char* file, const char* arg, ...) {
  char* const** no_env = nullptr;
  UTRAMP_COLLECT_ARGS(arg, argv, no_env);
  return execvpe(file, argv, environ);
}

int execle(const char* path, const char* arg, ...) {
  char* const* envp = nullptr;
  char* const** want_env = &envp;
  UTRAMP_COLLECT_ARGS(arg, argv, want_env);
  return execve(path, argv, envp);
}

}  // extern "C"

// ---- The unwinder sees the real callers ----------------------------------------------
//
// A library call traced through the GOT returns into utramp (its return address was
// replaced: ftrace/libcall.hpp), which the unwinder has no frame description for. So
// every way into the unwinder is interposed: each first puts back the return addresses
// of the thread's open library calls, then jumps to the real function with its
// arguments and stack untouched (it unwinds from its caller, as if called directly).
// C++ exceptions reach _Unwind_RaiseException through the C++ runtime's own PLT, and
// landing pads _Unwind_Resume, whichever object threw.
namespace utramp::agent::unwind {

constexpr const char* kNames[] = {"_Unwind_RaiseException", "_Unwind_Resume",
                                  "_Unwind_Resume_or_Rethrow", "_Unwind_ForcedUnwind"};
std::atomic<void*> g_real[4];

__attribute__((constructor(UTRAMP_INIT_GLUE))) void resolve() {
  for (int i = 0; i < 4; ++i) g_real[i].store(dlsym(RTLD_NEXT, kNames[i]), std::memory_order_relaxed);
}

}  // namespace utramp::agent::unwind

// Called by the interposers below with the real function's index; returns its address
// (the unwinder's library may have been loaded after start-up: asked then).
extern "C" __attribute__((visibility("hidden"))) void* utramp_agent_unwinding(int which) {
  namespace unwind = utramp::agent::unwind;
  utramp::ftrace::restore_return_addresses();
  void* real = unwind::g_real[which].load(std::memory_order_relaxed);
  if (!real) {
    real = dlsym(RTLD_NEXT, unwind::kNames[which]);
    if (!real) abort();  // called, so defined: only an unwinder linked into the caller hides it
    unwind::g_real[which].store(real, std::memory_order_relaxed);
  }
  return real;
}

// rdi, rsi, rdx: the arguments (_Unwind_ForcedUnwind has three); three pushes align the
// stack for the call.
#define UTRAMP_UNWIND_INTERPOSER(name, index)  \
  ".globl " #name "\n"                         \
  ".type " #name ", @function\n"               \
  #name ":\n"                                  \
  ".cfi_startproc\n"                           \
  "push %rdi\n"                                \
  ".cfi_adjust_cfa_offset 8\n"                 \
  "push %rsi\n"                                \
  ".cfi_adjust_cfa_offset 8\n"                 \
  "push %rdx\n"                                \
  ".cfi_adjust_cfa_offset 8\n"                 \
  "mov $" #index ", %edi\n"                    \
  "call utramp_agent_unwinding\n"              \
  "pop %rdx\n"                                 \
  ".cfi_adjust_cfa_offset -8\n"                \
  "pop %rsi\n"                                 \
  ".cfi_adjust_cfa_offset -8\n"                \
  "pop %rdi\n"                                 \
  ".cfi_adjust_cfa_offset -8\n"                \
  "jmp *%rax\n"                                \
  ".cfi_endproc\n"                             \
  ".size " #name ", .-" #name "\n"

asm(".text\n"
    UTRAMP_UNWIND_INTERPOSER(_Unwind_RaiseException, 0)
    UTRAMP_UNWIND_INTERPOSER(_Unwind_Resume, 1)
    UTRAMP_UNWIND_INTERPOSER(_Unwind_Resume_or_Rethrow, 2)
    UTRAMP_UNWIND_INTERPOSER(_Unwind_ForcedUnwind, 3));
