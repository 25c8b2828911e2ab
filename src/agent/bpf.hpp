// `utramp run` in the target: loads the eBPF objects the configuration names, maps the
// map file the CLI created, JIT-compiles every program and attaches it with one
// Manager::attach_many batch.
#pragma once

#include <string>
#include <vector>

#include "agent/config.hpp"
#include "agent/trust.hpp"
#include "common/result.hpp"

#include <nlohmann/json.hpp>

namespace utramp::agent {

// All or nothing: on error every link made is detached again and the message says what
// and where (the caller reports it and ends the target before main).
// The map file is mapped only when it is the user's own, in DIR (agent/trust.hpp).
// INT3S gets a line for each uprobe that stayed an int3 (no jump fits there):
// "PROGRAM (uprobe TARGET) at SYMBOL+0xOFF (0xADDR)".
// LIVE: in a running process (`utramp run -p`, configured over the control channel):
// programs on a library not loaded now are refused (its later load is not watched).
// One start at a time: refused while programs are attached.
Result<void> bpf_start(const Config& cfg, const TrustedDir& dir, std::vector<std::string>* int3s, bool live);

// bpf_start(), its outcome written to cfg.bpf_status_file in DIR: "ok" then a line
// "int3 LINE" for each of INT3S (`run` names them for a thread that blocks SIGTRAP,
// docs/sites.md), or "error: ..."; on error the target exits with status 125 before
// main runs (never started).
void bpf_start_or_exit(const Config& cfg, const TrustedDir& dir);

// `utramp run -p`: bpf_start(live) while the program's threads run, its outcome in the
// status file too (the CLI's SIGTRAP watch reads its int3 lines); the answer
// {"programs": N, "attached": links and probes, "int3": [...]}.
Result<nlohmann::json> bpf_start_live(const Config& cfg, const TrustedDir& dir);
// Takes away what bpf_start attached but the trampolines' links (the caller detaches
// every link in one batch first): the probes, the USDT semaphores raised, the
// statistics, the printk ring; the map file's pages are given back (ebpf::MapFile::
// retire). The programs' code stays: a thread may be finishing a run. Returns the
// probes removed; ERRORS gets what could not be done.
size_t bpf_stop(std::vector<std::string>* errors);
// `utramp show -p`: {"programs": [{name, section, type, target, attached, run_cnt,
// run_ns (with statistics on), misses}], "maps": [{name, type, max_entries, entries
// (hash maps)}], "probes": N, "stats": bool}; {} when no program is attached.
nlohmann::json bpf_show();

// The loader's announcement that its list of objects changed (sites/loader_watch.hpp),
// on the loading thread with the loader's locks held (which also serialise these
// calls): attaches the programs of libraries that have just been loaded, and detaches
// those of libraries that were unloaded (dlclose). The caller marks the thread at work.
void bpf_loader_changed();
// Whether bpf_start left programs on libraries (loaded or not): the loader's
// announcements are then watched.
bool bpf_has_library_programs();

}  // namespace utramp::agent
