// `utramp run` in the target: loads the eBPF objects the configuration names, maps the
// map file the CLI created, JIT-compiles every program and attaches it with one
// Manager::attach_many batch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "agent/config.hpp"
#include "agent/trust.hpp"
#include "common/result.hpp"

#include <nlohmann/json.hpp>

namespace utramp::agent {

// The client a state belongs to: kLaunchClient for the launcher's (`utramp run`), else
// the control channel's id of the `utramp run -p` that sent it (agent/control.hpp).
// Several clients' programs run side by side, on the same functions too (the
// trampolines take several links per function).
inline constexpr uint64_t kLaunchClient = 0;

// All or nothing: on error every link made is detached again and the message says what
// and where (the caller reports it and ends the target before main).
// The map file is mapped only when it is the user's own, in DIR (agent/trust.hpp).
// INT3S gets a line for each uprobe that stayed an int3 (no jump fits there):
// "PROGRAM (uprobe TARGET) at SYMBOL+0xOFF (0xADDR)".
// LIVE: in a running process (`utramp run -p`, configured over the control channel):
// programs on a library not loaded now are refused (its later load is not watched), and
// what a failed start attached is freed only after the grace period (a thread may have
// reached it). One start per client; a second client whose object reads bpf_printk's
// output is refused while another's does (the helper has one ring).
Result<void> bpf_start(const Config& cfg, const TrustedDir& dir, std::vector<std::string>* int3s, bool live,
                       uint64_t client);

// bpf_start() for the launcher, its outcome written to cfg.bpf_status_file in DIR: "ok"
// then a line "int3 LINE" for each of INT3S (`run` names them for a thread that blocks
// SIGTRAP, docs/sites.md), or "error: ..."; on error the target exits with status 125
// before main runs (never started).
void bpf_start_or_exit(const Config& cfg, const TrustedDir& dir);

// `utramp run -p` of CLIENT: bpf_start(live) while the program's threads run, its
// outcome in the status file too (the CLI's SIGTRAP watch reads its int3 lines); the
// answer {"programs": N, "attached": links and probes, "int3": [...]}.
Result<nlohmann::json> bpf_start_live(const Config& cfg, const TrustedDir& dir, uint64_t client);
// Takes away everything CLIENT's bpf_start_live attached: its trampolines' links (one
// detach_many, counted in LINKS), the probes, the USDT semaphores raised, its share of
// the statistics, the printk ring if it is its. The programs' code and the map file's
// mapping are freed after the trampolines' grace period (tramp::Manager::after_grace: a
// thread may still be in an image that counts into the map file). Returns the probes
// removed; ERRORS gets what could not be done. The launcher's state is never stopped.
size_t bpf_stop(uint64_t client, std::vector<std::string>* errors, size_t* links);
// After `detach -p` took every link away: CLIENT's list of links is forgotten.
void bpf_forget_links(uint64_t client);
// Each live eBPF link's client (show -p).
void bpf_link_owners(std::map<const void*, uint64_t>* out);
// `utramp show -p`: {"programs": [{name, section, type, target, attached, run_cnt,
// run_ns (with statistics on), misses, client}], "maps": [{name, type, max_entries,
// entries (hash maps), client}], "probes": N, "stats": bool}, every client's; {} when
// no program is attached.
nlohmann::json bpf_show();

// The loader's announcement that its list of objects changed (sites/loader_watch.hpp),
// on the loading thread with the loader's locks held (which also serialise these
// calls): attaches the launcher's programs of libraries that have just been loaded, and
// detaches those of libraries that were unloaded (dlclose). The caller marks the thread
// at work.
void bpf_loader_changed();
// Whether the launcher's bpf_start left programs on libraries (loaded or not): the loader's
// announcements are then watched.
bool bpf_has_library_programs();

}  // namespace utramp::agent
