#include "sites/table.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fnmatch.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>

#include "arch/arch.hpp"
#include "common/hex.hpp"
#include "common/init.hpp"
#include "os/c_runtime.hpp"
#include "os/elf_file.hpp"
#include "os/maps.hpp"
#include "os/text_writer.hpp"
#include "patch/patcher.hpp"
#include "sites/object.hpp"

namespace utramp::sites {

namespace {

// Functions the patcher calls while it patches (writes, barriers, its allocations and
// locks). A trampoline there is refused: its attach would patch the code it runs. A probe
// may go there: the trap and hit paths call none of them (probe/hit.hpp), a thread that
// traps on one mid-batch is sent on by the batch's emulation or the armed probe, and a
// hit on utramp's own call runs no program (ftrace::at_work).
bool patcher_calls(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "pwrite", "pwrite64", "__pwrite64", "syscall", "membarrier", "memcpy", "memmove", "memcmp",
      "memset", "sigaction", "__sigaction", "__libc_sigaction", "raise", "open", "open64",
      "__open64", "__libc_open64", "pthread_mutex_lock", "pthread_mutex_unlock",
      "__pthread_mutex_lock", "__pthread_mutex_unlock", "malloc", "free", "__libc_malloc",
      "__libc_free"};
  for (auto n : kNames)
    if (name == n) return true;
  return name.starts_with("__memcpy_") || name.starts_with("__memmove_") ||
         name.starts_with("__memset_") || name.starts_with("__memcmp_");
}

// Functions the trap path itself may run before any guard: the signal return trampoline
// every trap returns through, and the loader's lazy binding (a first call through a PLT
// slot not bound yet). Never patched, never probed: a probe there would trap inside its
// own trap.
bool on_trap_path(std::string_view name) {
  static constexpr std::string_view kNames[] = {"__restore_rt", "_dl_runtime_resolve_xsave",
                                                "_dl_runtime_resolve_xsavec",
                                                "_dl_runtime_resolve_fxsave", "_dl_fixup"};
  for (auto n : kNames)
    if (name == n) return true;
  return false;
}

// This copy of the runtime's object, found once at load: dladdr takes the loader's lock,
// which discover() must not wait for under its own (sites/loader_watch.hpp).
const char* g_own_object = nullptr;
__attribute__((constructor(UTRAMP_INIT_RUNTIME))) void find_own_object() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&find_own_object), &info) && info.dli_fname)
    g_own_object = strdup(info.dli_fname);
}

// Any copy of the runtime (libutramp.so, libutramp-agent.so, libutramp-internal.so):
// a process may hold two (a program linking libutramp, run under the agent), and neither
// patches the other's code.
bool runtime_object(std::string_view path) {
  const std::string_view base = path.substr(path.rfind('/') + 1);
  return base.starts_with("libutramp.so") || base.starts_with("libutramp-");
}

std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  buf[n] = 0;
  return buf;
}

struct LoadedObject {
  std::string path;
  uint64_t bias;
};

}  // namespace

namespace {
std::atomic<bool> g_trap_entries{false};
std::mutex g_trap_why_mu;
std::string* g_trap_why = nullptr;  // never freed: read by refusals after static destructors

// What a refusal of a site that only an int3 could divert adds: why it is not one.
std::string no_trap_entry() {
  std::lock_guard lock(g_trap_why_mu);
  return g_trap_why && !g_trap_why->empty() ? "; not diverted by an int3 either: " + *g_trap_why : std::string();
}
}  // namespace

void set_trap_entries(bool on, std::string why_not) {
  std::lock_guard lock(g_trap_why_mu);
  if (!g_trap_why) g_trap_why = new std::string();
  *g_trap_why = on ? std::string() : std::move(why_not);
  g_trap_entries.store(on, std::memory_order_relaxed);
}
bool trap_entries() noexcept { return g_trap_entries.load(std::memory_order_relaxed); }

const std::string& Site::object() const {
  // Never freed, and made on first use: a static string's initialiser and destructor
  // would run in the program's start-up and exit, where --libs traces the calls.
  static const std::string* none = new std::string();
  return object_path ? *object_path : *none;
}

std::string Site::label() const {
  return fmt::format("{}+{:#x}", info.name, info.site - info.func);
}

namespace {
// A patch op's label, made only when a diagnostic needs it (patch::PatchOp::describe).
std::string site_label(const void* site) { return static_cast<const Site*>(site)->label(); }
}  // namespace

bool Site::usable(std::string* why) const {
  auto no = [&](std::string r) {
    if (why) *why = std::move(r);
    return false;
  };
  if (unloaded) return no(fmt::format("{}: its object {} was unloaded", label(), object()));
  if (blacklisted) return no(fmt::format("{}: {}", label(), blacklist_reason));
  if (!info.attachable) return no(fmt::format("{}: {}", info.name, info.reason));
  if (!canonical && !(info.kind == SiteKind::nop1x5 && trap_entries()))
    return no(fmt::format("{}: {} site not canonicalised yet (needs all other threads stopped){}",
                          label(), site_kind_name(info.kind), no_trap_entry()));
  return true;
}


SiteTable& SiteTable::instance() {
  static SiteTable* t = new SiteTable();  // never destroyed: sites outlive statics
  return *t;
}

const std::string* SiteTable::object_path(const std::string& path) {
  for (const auto& p : object_paths_)
    if (*p == path) return p.get();
  object_paths_.push_back(std::make_unique<const std::string>(path));
  return object_paths_.back().get();
}

Site* SiteTable::new_site() {
  if (block_used_ == kSiteBlock) {
    site_blocks_.push_back(std::make_unique<Site[]>(kSiteBlock));
    block_used_ = 0;
  }
  return &site_blocks_.back()[block_used_++];
}

Result<size_t> SiteTable::discover(const std::function<bool(std::string_view)>& want,
                                   std::vector<std::string>* added_objects) {
  std::lock_guard lock(mu_);
  std::vector<LoadedObject> objs;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* out = static_cast<std::vector<LoadedObject>*>(data);
        std::string name = info->dlpi_name ? info->dlpi_name : "";
        out->push_back({std::move(name), info->dlpi_addr});
        return 0;
      },
      &objs);
  const std::string own = g_own_object ? g_own_object : "";
  size_t added = 0;
  bool first = true;
  std::vector<std::string> now;
  for (auto& o : objs) {
    // The first object is the main program, reported with an empty name.
    if (first && o.path.empty()) o.path = self_exe();
    first = false;
    now.push_back(fmt::format("{}@{:#x}", o.path, o.bias));
  }
  // Objects unloaded (dlclose) since the last call: their code is gone, so are their sites.
  for (const std::string& key : seen_objects_) {
    if (std::find(now.begin(), now.end(), key) != now.end()) continue;
    const std::string path = key.substr(0, key.rfind('@'));
    const uint64_t bias = std::stoull(key.substr(key.rfind('@') + 1), nullptr, 16);
    // Site records stay (others may hold pointers to them) but can never be patched.
    for (auto& s : sites_) {
      if (s->object() != path || s->bias != bias || s->unloaded) continue;
      s->unloaded = true;
      s->applied = s->desired = SiteState{};
      s->applied_bytes.clear();
      s->desired_bytes.clear();
      by_addr_.erase(s->info.func);
      by_addr_.erase(s->info.site);
    }
  }
  std::erase_if(seen_objects_, [&](const std::string& k) {
    return std::find(now.begin(), now.end(), k) == now.end();
  });
  for (size_t oi = 0; oi < objs.size(); ++oi) {
    auto& o = objs[oi];
    const std::string& key = now[oi];
    if (std::find(seen_objects_.begin(), seen_objects_.end(), key) != seen_objects_.end()) continue;
    if (want && !o.path.empty() && !want(o.path)) continue;  // later, if ever asked for
    seen_objects_.push_back(key);
    if (o.path.empty() || o.path.starts_with("linux-vdso") || o.path.starts_with("linux-gate"))
      continue;
    if (added_objects) added_objects->push_back(o.path);
    if (o.path == own || runtime_object(o.path)) continue;  // the runtime never patches itself
    auto elf = os::ElfFile::open(o.path);
    if (!elf) {
      skipped_.push_back(fmt::format("{}: {}", o.path, elf.error().message));
      continue;
    }
    ObjectSites objsites = analyse_object(**elf, o.bias, [](uint64_t a, uint64_t n) {
      return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(a), n);
    });
    // Functions the program marked error-injectable (UTRAMP_ALLOW_ERROR_INJECTION puts
    // their addresses in this section). Read from the file, with its relocations: an
    // object announced by the loader is not relocated yet (sites/loader_watch.hpp).
    std::vector<uint64_t> injectable = (*elf)->address_table("utramp_error_inject");
    for (uint64_t& a : injectable) a += o.bias;
    // Grown at most once per object (and still geometrically over many objects), not
    // reallocated and rehashed step by step as its sites are added.
    const std::string* path = object_path(o.path);
    const size_t sites_need = sites_.size() + objsites.functions.size();
    if (sites_.capacity() < sites_need) sites_.reserve(std::max(sites_need, 2 * sites_.capacity()));
    const size_t addrs_need = by_addr_.size() + 2 * objsites.functions.size();
    if (static_cast<float>(addrs_need) > by_addr_.max_load_factor() * static_cast<float>(by_addr_.bucket_count()))
      by_addr_.reserve(std::max(addrs_need, 2 * by_addr_.size()));
    for (SiteInfo& info : objsites.functions) {
      if (by_addr_.count(info.func) || by_addr_.count(info.site)) continue;
      Site* s = new_site();
      s->object_path = path;
      s->bias = o.bias;
      s->reports_calls = objsites.reports_calls;
      if (info.kind != SiteKind::none) {
        const uint8_t* p = reinterpret_cast<const uint8_t*>(info.site);
        s->original.assign(p, p + info.site_len);
      }
      // A 5-byte NOP other than kNop5 (clang plants `nopl 8(%rax,%rax)`) is one
      // instruction too, but commit() expects kNop5 in the nop state: canonicalize()
      // swaps it, which is safe with threads running.
      s->canonical = (info.kind == SiteKind::nop5 &&
                      std::equal(s->original.begin(), s->original.end(), arch::kNop5.begin(),
                                 arch::kNop5.end())) ||
                     info.kind == SiteKind::prologue ||
                     info.kind == SiteKind::mcount;  // its call stays until attached
      if (on_trap_path(info.name)) {
        s->blacklisted = true;
        s->blacklist_reason = "run by the SIGTRAP path itself (signal return, lazy binding)";
      } else if (patcher_calls(info.name)) {
        s->blacklisted = true;
        s->probes_allowed = true;
        s->blacklist_reason = "used by the patcher itself (a probe may go here, a trampoline not)";
      }
      s->error_injectable =
          std::find(injectable.begin(), injectable.end(), info.func) != injectable.end();
      s->info = std::move(info);
      by_addr_[s->info.func] = s;
      by_addr_[s->info.site] = s;
      sites_.push_back(s);
      ++added;
    }
  }
  return added;
}

Result<size_t> SiteTable::canonicalize(Quiescence q, std::string_view object) {
  std::lock_guard lock(mu_);
  bool alone = q == Quiescence::stopped;
  if (!alone) {
    auto n = os::thread_count();
    alone = n && *n == 1;
  }
  std::vector<patch::PatchOp> ops;
  std::vector<Site*> touched;
  size_t left = 0;
  for (auto& sp : sites_) {
    Site& s = *sp;
    if (s.canonical || s.blacklisted || s.unloaded || !s.info.attachable) continue;
    if (!object.empty() && s.object() != object) continue;
    patch::PatchOp op;
    op.addr = s.info.site;
    op.describe = site_label;
    op.of = &s;
    switch (s.info.kind) {
      case SiteKind::nop1x5:
        if (!alone) {
          ++left;
          continue;
        }
        op.expected = s.original;
        op.replacement.assign(arch::kNop5.begin(), arch::kNop5.end());
        break;
      case SiteKind::nop5:  // one NOP for another: safe with threads running
      case SiteKind::fentry_call:
        op.expected = s.original;
        op.replacement.assign(arch::kNop5.begin(), arch::kNop5.end());
        break;
      case SiteKind::fentry_gotpcrel: {
        // One 6-byte call becomes a 5-byte NOP and a 1-byte NOP: a single instruction
        // replaced by two, safe with threads running (nothing can be at byte 5).
        op.expected = s.original;
        op.replacement.assign(arch::kNop5.begin(), arch::kNop5.end());
        op.replacement.push_back(arch::kNop1);
        break;
      }
      case SiteKind::xray_sled: {
        // jmp +9 skips bytes 2..10, so no thread is ever inside them: NOP5 plus a
        // jmp +4 over the rest keeps every reachable boundary (0 and 11) intact.
        op.expected.assign(s.original.begin(), s.original.begin() + 7);
        op.replacement.assign(arch::kNop5.begin(), arch::kNop5.end());
        op.replacement.append(arch::kJmpShort4.begin(), arch::kJmpShort4.end());
        break;
      }
      default:
        continue;
    }
    op.emulate = patch::Emulation::jump_to(s.info.site + s.info.site_len);
    ops.push_back(std::move(op));
    touched.push_back(&s);
  }
  if (!ops.empty()) {
    UTRAMP_TRY(patch::apply(ops));
    for (Site* s : touched) s->canonical = true;
  }
  return left;
}

Result<size_t> SiteTable::restore_discovered(std::vector<std::string>* left) {
  std::lock_guard lock(mu_);
  std::vector<patch::PatchOp> ops;
  std::vector<Site*> touched;
  for (auto& sp : sites_) {
    Site& s = *sp;
    if (!s.canonical || s.unloaded || s.applied.op != SiteOp::nop || s.desired.op != SiteOp::nop) continue;
    const std::vector<uint8_t> nop5(arch::kNop5.begin(), arch::kNop5.end());
    switch (s.info.kind) {
      case SiteKind::nop1x5:
      case SiteKind::nop5:
      case SiteKind::fentry_call:
        if (s.original == nop5) continue;  // already the file's bytes
        break;
      case SiteKind::fentry_gotpcrel:
      case SiteKind::xray_sled:
        left->push_back(fmt::format("{}: its canonical form is two instructions (a thread may be "
                                    "at the second), left as it is",
                                    s.label()));
        continue;
      default:
        continue;  // prologue, mcount: their nop state is the file's bytes already
    }
    patch::PatchOp op;
    op.addr = s.info.site;
    op.describe = site_label;
    op.of = &s;
    op.expected = nop5;
    op.replacement = s.original;
    // A thread trapped on the int3 skips the site, as the canonical NOP did.
    op.emulate = patch::Emulation::jump_to(s.info.site + arch::kSiteLen);
    ops.push_back(std::move(op));
    touched.push_back(&s);
  }
  if (ops.empty()) return size_t{0};
  UTRAMP_TRY(patch::apply(ops));
  for (Site* s : touched) {
    s->canonical = false;
    s->applied_bytes.clear();  // encoded for the canonical NOP
    s->desired_bytes.clear();
  }
  return touched.size();
}

Site* SiteTable::find(uint64_t addr) {
  std::lock_guard lock(mu_);
  auto it = by_addr_.find(addr);
  return it == by_addr_.end() ? nullptr : it->second;
}

Site* SiteTable::find_name(std::string_view name, std::string_view object) {
  std::lock_guard lock(mu_);
  for (auto& s : sites_)
    if (s->info.name == name && !s->unloaded && (object.empty() || s->object() == object)) return s;
  return nullptr;
}

Result<Site*> SiteTable::resolve(uint64_t addr) {
  std::lock_guard lock(mu_);
  if (Site* s = find(addr)) return s;
  auto maps = os::read_maps();
  if (maps && !os::range_executable(*maps, addr, 1))
    return make_error(Errc::not_executable,
                      fmt::format("{:#x} is not in executable memory: not a function", addr));
  // The function containing addr, if any: decode from its start to tell a boundary
  // from the middle of an instruction.
  const Site* owner = nullptr;
  for (auto& sp : sites_)
    if (!sp->unloaded && addr > sp->info.func && addr < sp->info.func + sp->info.size) owner = sp;
  if (!owner)
    return make_error(Errc::not_found,
                      fmt::format("{:#x} is not the start of any known function", addr));
  const uint64_t f = owner->info.func;
  for (uint64_t a = f; a < f + owner->info.size;) {
    auto insn = arch::decode(reinterpret_cast<const uint8_t*>(a), f + owner->info.size - a, a);
    if (!insn) break;
    if (a == addr)
      return make_error(Errc::invalid_argument,
                        fmt::format("{:#x} is {}+{:#x}: an instruction boundary inside the "
                                    "function, not its start",
                                    addr, owner->info.name, addr - f));
    if (addr < a + insn->length)
      return make_error(Errc::not_instruction_boundary,
                        fmt::format("{:#x} is {}+{:#x}: inside the instruction '{}' at +{:#x} "
                                    "(bytes {})",
                                    addr, owner->info.name, addr - f, insn->text(), a - f,
                                    hex_bytes(insn->raw())));
    a += insn->length;
  }
  return make_error(Errc::not_instruction_boundary,
                    fmt::format("{:#x} is {}+{:#x}: not a function start", addr, owner->info.name,
                                addr - f));
}

std::vector<Site*> SiteTable::match(std::string_view glob) {
  std::lock_guard lock(mu_);
  std::string g(glob);
  std::vector<Site*> out;
  for (auto& s : sites_)
    if (!s->unloaded && fnmatch(g.c_str(), s->info.name.c_str(), 0) == 0) out.push_back(s);
  return out;
}

std::vector<Site*> SiteTable::all() {
  std::lock_guard lock(mu_);
  std::vector<Site*> out;
  for (auto& s : sites_)
    if (!s->unloaded) out.push_back(s);
  return out;
}

std::vector<std::string> SiteTable::skipped_objects() const {
  std::lock_guard lock(mu_);
  return skipped_;
}

// An mcount site's canonical state is its own call, left as the compiler made it: a
// function nothing traces keeps calling mcount, so a -pg program's gprof profile
// (gmon.out) of those functions is what it would be without utramp. Attached, the call
// becomes `jmp stub` (and a 1-byte NOP where the call went through the GOT: no thread
// can be at its byte 5). In the int3 form (Site::trap_entry) every state but the NOP is
// the NOP's bytes with an int3 over byte 0: the patcher keeps it and sends threads on
// as the state's call or jump would (patch/patcher.hpp).
Result<std::vector<uint8_t>> SiteTable::bytes_for(const Site& s, const SiteState& st, bool trap) const {
  const bool prologue = s.info.kind == SiteKind::prologue;
  const bool mcount = s.info.kind == SiteKind::mcount;
  auto at_nop = [&] {
    if (prologue) return std::vector<uint8_t>(s.original.begin(), s.original.begin() + arch::kSiteLen);
    if (mcount || !s.canonical) return std::vector<uint8_t>(s.original.begin(), s.original.end());  // five 1-byte NOPs not canonicalised
    return std::vector<uint8_t>(arch::kNop5.begin(), arch::kNop5.end());
  };
  // The int3 form: the trap table holds the target, but only one the call or jump
  // could reach is taken, so both forms accept the same states.
  auto as_trap = [&] {
    std::vector<uint8_t> out = at_nop();
    out[0] = arch::kTrapByte;
    return out;
  };
  switch (st.op) {
    case SiteOp::nop:
      return at_nop();
    case SiteOp::call: {
      if (prologue || mcount)
        return make_error(Errc::unsupported,
                          fmt::format("{}: a {} site can only jump, not call", s.label(),
                                      prologue ? "relocated-prologue" : "mcount"));
      auto b = arch::encode_call(s.info.site, st.target);
      if (!b) return make_error(b.error().code, fmt::format("{}: {}", s.label(), b.error().message));
      if (trap) return as_trap();
      return std::vector<uint8_t>(b->begin(), b->end());
    }
    case SiteOp::jmp: {
      auto b = arch::encode_jmp(s.info.site, st.target);
      if (!b) return make_error(b.error().code, fmt::format("{}: {}", s.label(), b.error().message));
      if (trap) return as_trap();
      std::vector<uint8_t> out(b->begin(), b->end());
      if (mcount) out.resize(s.info.site_len, arch::kNop1);
      return out;
    }
  }
  return make_error(Errc::invalid_argument, "bad site state");
}

Result<bool> SiteTable::trap_form(const Site* site, const SiteState& state) const {
  if (state.op == SiteOp::nop) return false;
  if (site->applied.op != SiteOp::nop) return site->trap_entry;  // kept until back at the NOP
  // The C library while other threads run: every way to change a site there puts an
  // int3 in it, if only for the microseconds of a batch, and glibc runs its own functions
  // with every signal blocked (a thread's start and end, the children of posix_spawn and
  // vfork): a thread that reached the int3 then would end the process (seen: Python's
  // threading HTTP server, an ending thread in getpagesize). Patched only at start-up.
  if (const std::string why = os::c_runtime_change_refused(site->object()); !why.empty())
    return make_error(Errc::busy, fmt::format("{}: not patched in {}; trace it from start-up (utramp record -- "
                                              "PROGRAM)",
                                              site->label(), why));
  if (site->info.kind == SiteKind::nop1x5 && !site->canonical) return true;  // usable(): allowed
  // A relocated prologue whose first instruction is shorter than the jump replaces
  // several instructions: a thread stopped between two of them would resume inside the
  // jump. Only a process with no other thread (the agent before main) may take it;
  // otherwise only the int3 form, when allowed.
  if (site->info.kind != SiteKind::prologue) return false;
  auto first = arch::decode(reinterpret_cast<const uint8_t*>(site->addr()), arch::kMaxInsnLen, site->addr());
  auto threads = os::thread_count();
  if (!first || first->length >= arch::kSiteLen || (threads && *threads == 1)) return false;
  if (trap_entries()) return true;
  return make_error(Errc::busy,
                    fmt::format("{}: no compiler site; its relocated prologue replaces several "
                                "instructions, which is only safe while no other thread runs "
                                "({} threads now): attach at start-up (utramp record does), "
                                "or build with -fpatchable-function-entry=5{}",
                                site->label(), threads ? *threads : 0, no_trap_entry()));
}

bool SiteTable::takes_int3_form(const Site* site) const {
  std::lock_guard lock(mu_);
  auto t = trap_form(site, SiteState{SiteOp::jmp, 0});
  return t && *t;
}

bool SiteTable::any_int3_entry() const {
  std::lock_guard lock(mu_);
  for (const auto& s : sites_)
    if (!s->unloaded && s->trap_entry && s->applied.op != SiteOp::nop) return true;
  return false;
}

size_t SiteTable::put_file_bytes_back_in_child() {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& s : sites_) {
    if (s->unloaded || s->original.empty()) continue;
    const auto* now = reinterpret_cast<const uint8_t*>(s->info.site);
    if (std::equal(s->original.begin(), s->original.end(), now)) continue;
    if (os::write_text(s->info.site, s->original)) ++n;
  }
  return n;
}

Result<std::vector<uint8_t>> SiteTable::checked_bytes(const Site* site, const SiteState& state,
                                                      bool* trap) const {
  if (!site) return make_error(Errc::invalid_argument, "no such site");
  std::string why;
  if (!site->usable(&why)) return make_error(Errc::unsupported, why);
  auto t = trap_form(site, state);
  if (!t) return std::move(t).error();
  if (trap) *trap = *t;
  return bytes_for(*site, state, *t);  // proves the state is encodable before accepting it
}

Result<void> SiteTable::check_desired(const Site* site, SiteState state) {
  std::lock_guard lock(mu_);
  auto b = checked_bytes(site, state);
  if (!b) return std::move(b).error();
  return {};
}

Result<void> SiteTable::set_desired(Site* site, SiteState state) {
  std::lock_guard lock(mu_);
  bool trap = false;
  auto b = checked_bytes(site, state, &trap);
  if (!b) return std::move(b).error();
  if (site->applied.op == SiteOp::nop) site->trap_entry = trap;
  site->desired = state;
  site->desired_bytes = std::move(*b);
  if (std::find(dirty_.begin(), dirty_.end(), site) == dirty_.end()) dirty_.push_back(site);
  return {};
}

Result<void> SiteTable::commit(std::vector<patch::PatchOp> with) {
  std::lock_guard lock(mu_);
  std::vector<patch::PatchOp> ops = std::move(with);
  std::vector<Site*> changed;
  // Only sites whose desired state was set since the last commit can differ.
  std::vector<Site*> dirty;
  dirty.swap(dirty_);
  ops.reserve(ops.size() + dirty.size());
  changed.reserve(dirty.size());
  for (Site* sp : dirty) {
    Site& s = *sp;
    if (s.desired == s.applied || s.unloaded) continue;
    patch::PatchOp op;
    op.addr = s.info.site;
    op.describe = site_label;
    op.of = &s;
    // The op's bytes are made in place (patch::OpBytes), not copied through vectors.
    Result<void> made = [&]() -> Result<void> {
      if (s.applied_bytes.empty()) {
        auto a = bytes_for(s, s.applied, s.trap_entry);
        if (!a) return std::move(a).error();
        s.applied_bytes = std::move(*a);
      }
      op.expected = s.applied_bytes;
      if (!s.desired_bytes.empty()) {
        op.replacement = s.desired_bytes;
        return {};
      }
      auto d = bytes_for(s, s.desired, s.trap_entry);
      if (!d) return std::move(d).error();
      op.replacement = *d;
      return {};
    }();
    if (!made) {
      for (Site* d : dirty) { d->desired = d->applied; d->desired_bytes = d->applied_bytes; }  // nothing changed, nothing pending
      return std::move(made).error();
    }
    op.keep_trap = s.trap_entry && s.desired.op != SiteOp::nop;
    switch (s.desired.op) {
      case SiteOp::nop:
        if (s.info.kind == SiteKind::prologue) {
          if (!s.prologue_ool) {
            for (Site* d : dirty) { d->desired = d->applied; d->desired_bytes = d->applied_bytes; }
            return make_error(Errc::unsupported,
                              fmt::format("{}: restoring a relocated prologue needs its "
                                          "out-of-line copy",
                                          s.label()));
          }
          op.emulate = patch::Emulation::jump_to(s.prologue_ool);
        } else if (s.info.kind == SiteKind::mcount) {
          // Back to the compiler's call: a thread trapped on it calls mcount.
          auto call = arch::decode(s.original.data(), s.original.size(), s.info.site);
          if (!call) {
            for (Site* d : dirty) { d->desired = d->applied; d->desired_bytes = d->applied_bytes; }
            return std::move(call).error();
          }
          const uint64_t target = call->rip_relative
                                      ? *reinterpret_cast<const uint64_t*>(call->target)  // the GOT slot
                                      : call->target;
          op.emulate = patch::Emulation::call(target, s.info.site + s.info.site_len);
        } else {
          op.emulate = patch::Emulation::jump_to(s.info.site + arch::kSiteLen);
        }
        break;
      case SiteOp::call:
        op.emulate = patch::Emulation::call(s.desired.target, s.info.site + arch::kSiteLen);
        break;
      case SiteOp::jmp:
        op.emulate = patch::Emulation::jump_to(s.desired.target);
        break;
    }
    ops.push_back(std::move(op));
    changed.push_back(&s);
  }
  if (ops.empty()) return {};
  if (auto r = patch::apply(ops); !r) {
    for (Site* d : dirty) { d->desired = d->applied; d->desired_bytes = d->applied_bytes; }  // nothing changed, nothing pending
    return std::move(r).error();
  }
  for (Site* s : changed) {
    s->applied = s->desired;
    s->applied_bytes = s->desired_bytes;
  }
  return {};
}

}  // namespace utramp::sites
