// `utramp run` in the target: loads the eBPF objects the configuration names, maps the
// map file the CLI created, JIT-compiles every program and attaches it with one
// Manager::attach_many batch.
#pragma once

#include <string>
#include <vector>

#include "agent/config.hpp"
#include "agent/trust.hpp"
#include "common/result.hpp"

namespace utramp::agent {

// All or nothing: on error every link made is detached again and the message says what
// and where (the caller reports it and ends the target before main).
// The map file is mapped only when it is the user's own, in DIR (agent/trust.hpp).
// INT3S gets a line for each uprobe that stayed an int3 (no jump fits there):
// "PROGRAM (uprobe TARGET) at SYMBOL+0xOFF (0xADDR)".
Result<void> bpf_start(const Config& cfg, const TrustedDir& dir, std::vector<std::string>* int3s);

// bpf_start(), its outcome written to cfg.bpf_status_file in DIR: "ok" then a line
// "int3 LINE" for each of INT3S (`run` names them for a thread that blocks SIGTRAP,
// docs/sites.md), or "error: ..."; on error the target exits with status 125 before
// main runs (never started).
void bpf_start_or_exit(const Config& cfg, const TrustedDir& dir);

// The loader's announcement that its list of objects changed (sites/loader_watch.hpp),
// on the loading thread with the loader's locks held (which also serialise these
// calls): attaches the programs of libraries that have just been loaded, and detaches
// those of libraries that were unloaded (dlclose). The caller marks the thread at work.
void bpf_loader_changed();
// Whether bpf_start left programs on libraries (loaded or not): the loader's
// announcements are then watched.
bool bpf_has_library_programs();

}  // namespace utramp::agent
