// The site table of this process: every function of every loaded object, what its
// entry holds, and — kept apart — the state wanted for it and the state its bytes are
// in. Changing a site is: set the desired state, then commit, which turns every
// difference into one patch batch.
#pragma once

#include <pthread.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.hpp"
#include "patch/patcher.hpp"
#include "sites/site.hpp"

namespace utramp::sites {

enum class SiteOp : uint8_t { nop, call, jmp };

struct SiteState {
  SiteOp op = SiteOp::nop;
  uint64_t target = 0;
  bool operator==(const SiteState&) const = default;
};

// How sure we are that no other thread is executing inside the sites being
// canonicalised (five 1-byte NOPs cannot be swapped safely otherwise).
enum class Quiescence : uint8_t {
  live,     // other threads may run: only verified single-threaded processes qualify
  stopped,  // the caller has stopped every other thread (ptrace, before main, dlopen path)
};

struct Site {
  SiteInfo info;
  // Path of the ELF object: one string per object (SiteTable's, never freed), shared by
  // its sites rather than copied into each (docs/benchmarks.md, "The agent's start-up heap").
  const std::string& object() const;  // "" before it is set
  const std::string* object_path = nullptr;
  uint64_t bias = 0;                // its load bias
  // Bytes at discovery, [site, site + site_len); in place (OpBytes), as are the states'.
  patch::OpBytes original;
  bool canonical = false;           // the entry holds its canonical NOP (or intact prologue)
  bool traced_by_agent = false;     // the agent has considered it (attached or not)
  bool error_injectable = false;    // marked with UTRAMP_ALLOW_ERROR_INJECTION
  bool unloaded = false;            // its object was dlclose'd: never patched again
  bool blacklisted = false;         // runtime code or on the patch path: never patched
  // Blacklisted for trampolines only: a function the patcher calls (malloc, memcpy,
  // pwrite, ...). Probes may go there (probe/analysis.cpp): the trap and hit paths call
  // none of them, and a hit on utramp's own call runs no program (ftrace::at_work).
  bool probes_allowed = false;
  bool reports_calls = false;       // its object is built with -finstrument-functions
                                    // (sites/object.hpp): a tracer needs no site here
  // While the site is not at its NOP: its entry is diverted by an int3 over byte 0 (the
  // rest of the bytes the file's), which sends every thread where the state says, rather
  // than by a call or jump written over it. Decided when it leaves its NOP, kept until
  // it is back (see set_trap_entries).
  bool trap_entry = false;
  const char* blacklist_reason = "";  // a literal
  uint64_t prologue_ool = 0;        // for prologue sites: relocated copy that resumes the body
  SiteState desired, applied;
  // The bytes of each state, encoded once when it is set (empty: not computed yet).
  patch::OpBytes desired_bytes, applied_bytes;

  uint64_t addr() const { return info.site; }
  std::string label() const;        // "symbol+0x4"
  bool usable(std::string* why = nullptr) const;
};

// Entries diverted by int3, for functions whose site cannot change while other threads
// run (five 1-byte NOPs not canonicalised, a relocated prologue whose first instruction
// is shorter than a jump): one byte is written atomically, and a thread that already ran
// part of the first instructions is not affected. Each call then costs a SIGTRAP, and a
// thread that blocks SIGTRAP and reaches one ends the process, so it is off unless asked
// for (the agent attached to a running process turns it on once it has seen that no
// thread keeps SIGTRAP blocked: docs/attach.md, "Limits"). Off, such sites are refused;
// WHY_NOT, when given, is added to the refusal.
// (Sites of the C library are not changed at all while other threads run:
// os::c_runtime_object, SiteTable::trap_form.)
void set_trap_entries(bool on, std::string why_not = {});
bool trap_entries() noexcept;


class SiteTable {
 public:
  static SiteTable& instance();

  // Adds the functions of every object loaded since the last call (main program,
  // shared libraries, dlopen'ed objects). Returns how many sites were added. With
  // `want`, only the objects it accepts (by path) are analysed now; the others are
  // left for a later call (analysing every library costs most of a tracer's start-up).
  // `added_objects` receives the paths of the objects analysed by this call.
  Result<size_t> discover(const std::function<bool(std::string_view path)>& want = {},
                          std::vector<std::string>* added_objects = nullptr);
  // Rewrites compiler sites into one 5-byte NOP. Sites that need quiescence are left
  // alone (and stay unusable) under Quiescence::live when other threads exist; the
  // number left is returned.
  // With `object`, only the sites of that object (a freshly dlopen'ed one).
  Result<size_t> canonicalize(Quiescence q, std::string_view object = {});

  Site* find(uint64_t addr);  // by function start or site address
  // Like find(), but an address that is not a function start gets an error saying what
  // it is: an instruction boundary inside symbol+off, the middle of an instruction,
  // unknown memory, or memory that is not executable.
  Result<Site*> resolve(uint64_t addr);
  // The first function of that name; with `object`, only in the object of that path.
  Site* find_name(std::string_view name, std::string_view object = {});
  std::vector<Site*> match(std::string_view glob);
  std::vector<Site*> all();

  // Undoes canonicalize() where threads may be running: every canonical site that
  // holds no call or jump gets the bytes it had at discovery (the file's) back, in one
  // patch batch. Safe for the kinds whose canonical NOP is one instruction that becomes
  // the original one or several (nop1x5, nop5, fentry_call); a kind whose canonical
  // form is two instructions (fentry_gotpcrel, xray_sled: a thread may be between them)
  // stays canonical and is named in LEFT with the reason. Returns how many were restored.
  Result<size_t> restore_discovered(std::vector<std::string>* left);
  // Whether attaching SITE now would divert its entry by an int3 (Site::trap_entry).
  bool takes_int3_form(const Site* site) const;
  // Whether a site's entry is diverted by an int3 now.
  bool any_int3_entry() const;
  // In a forked child that is not traced, single-threaded (a pthread_atfork child
  // handler): every site that differs from the bytes it had at discovery gets them
  // back, written directly (no other thread can be inside). Returns how many.
  size_t put_file_bytes_back_in_child();

  // Desired state; checked here (site usable, target reachable), applied by commit().
  Result<void> set_desired(Site* site, SiteState state);
  // Whether set_desired would accept STATE for SITE now, without asking for it: a batch
  // of many sites (tramp::Manager::attach_many) leaves out the ones it would refuse
  // rather than failing all of them.
  Result<void> check_desired(const Site* site, SiteState state);
  // Applies every desired != applied in one batch; all or nothing. WITH: other ops
  // (a trampoline's hops, tramp/trampoline.cpp) written in the same batch; the sites'
  // ops are appended to it (a tracer's 1,000 hops were copied once more, 136 KB).
  Result<void> commit(std::vector<patch::PatchOp> with = {});

  std::vector<std::string> skipped_objects() const;
  // Held across fork() (see tramp/trampoline.cpp). In the child the recursive mutex's
  // owner is a thread id that no longer exists, so unlocking fails (EPERM) and would
  // leave it held forever: it starts afresh there instead.
  void fork_lock() { mu_.lock(); }
  void fork_unlock() {
    if (pthread_mutex_unlock(mu_.native_handle()) != 0) new (&mu_) std::recursive_mutex();
  }

 private:
  SiteTable() = default;
  // TRAP: the int3 form of a state that is not the NOP (Site::trap_entry).
  Result<std::vector<uint8_t>> bytes_for(const Site& s, const SiteState& st, bool trap) const;
  // Whether STATE at SITE takes the int3 form (Site::trap_entry), or an error when it can
  // take neither form now.
  Result<bool> trap_form(const Site* site, const SiteState& state) const;
  // set_desired's checks (mu_ held): the bytes STATE takes at SITE.
  Result<std::vector<uint8_t>> checked_bytes(const Site* site, const SiteState& state,
                                             bool* trap = nullptr) const;

  // A new Site of the table (mu_ held), from a block of kSiteBlock: a program's
  // thousand functions were a thousand allocations.
  Site* new_site();

  mutable std::recursive_mutex mu_;
  // In discovery order. Never freed: others hold pointers to them (an unloaded object's
  // sites stay, marked).
  std::vector<Site*> sites_;
  static constexpr size_t kSiteBlock = 64;
  std::vector<std::unique_ptr<Site[]>> site_blocks_;
  size_t block_used_ = kSiteBlock;  // of site_blocks_.back()
  std::vector<Site*> dirty_;  // desired state set since the last commit
  std::unordered_map<uint64_t, Site*> by_addr_;
  std::vector<std::string> seen_objects_;  // "path@bias" of objects loaded now
  // Every object path a site has had, once each (Site::object_path points here).
  std::vector<std::unique_ptr<const std::string>> object_paths_;
  const std::string* object_path(const std::string& path);
  std::vector<std::string> skipped_;
};

}  // namespace utramp::sites
