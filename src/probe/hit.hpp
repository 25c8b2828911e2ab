// The hit path of probes: what runs when a probed instruction executes. Shared by the
// manager (which builds and publishes these structures) and hit.cpp (which reads them
// from the SIGTRAP handler, from detours and from the return trampoline).
//
// Lifetimes:
//   ProbeSite   one per probed address, permanent (its slot and detour too): a thread
//               may sit in a slot or detour for as long as the displaced instruction
//               takes (a system call), so they are never freed; probing the same
//               address again reuses them.
//   ProbeList   immutable once published; replaced whole on every change, freed after
//               an SRCU grace period (srcu_synchronize) like the Probes it lists.
//   Probe       freed after a grace period once detached.
//   RetprobeSlot  permanent table; a slot's generation changes when its retprobe is
//               detached, so instances still on threads' return stacks are recognised
//               as orphans and only returned through.
//
// Everything a reader touches is read with atomics or is immutable; nothing on the hit
// path allocates, locks or calls into libc (hit.cpp is compiled with
// -mgeneral-regs-only so that detours need not save vector registers around it).
#pragma once

#include <atomic>
#include <cstdint>

#include "arch/probe.hpp"

namespace utramp::probe {

struct ProbeSite;

enum class ProbeKind : uint8_t { probe, retprobe };

struct Probe {
  uint64_t id = 0;
  ProbeKind kind = ProbeKind::probe;
  ProbeSite* site = nullptr;
  arch::ProbeHandler pre = nullptr;   // retprobe: the entry handler
  arch::ProbeHandler post = nullptr;  // retprobe: the return handler
  uint64_t cookie = 0;
  // The handler touches only general-purpose registers (see arch::insn_touches_...):
  // detours and the return trampoline may call it without saving the vector state.
  bool pre_gprs_only = false, post_gprs_only = false;
  bool keep_int3 = false;  // the site stays an int3 while this probe is there
  bool count_hits = true;  // ProbeSpec::count_hits
  std::atomic<uint64_t> hits{0}, misses{0};
  // Return probes.
  uint32_t rp_slot = 0, rp_gen = 0;
  uint32_t maxactive = 0;
};

// The probes at one address, in attach order.
struct ProbeList {
  uint32_t n = 0;
  bool any_post = false;           // a post-handler: int3 path uses the post slot
  bool pre_needs_xstate = false;   // a pre/entry handler may touch vector state
  bool post_needs_xstate = false;
  Probe* items[1];                 // n entries (allocated with the list)
};

struct ProbeSite {
  uint64_t addr = 0;
  uint8_t len = 0;                  // the displaced instruction's length
  arch::OutOfLine ool;
  uint64_t slot = 0;                // Kind::slot: insn; jmp back
  uint64_t slot_post = 0;           //             insn; int3; jmp back
  uint64_t post_trap = 0;           //             address of that int3
  std::atomic<ProbeList*> list{nullptr};
  // Our int3 may be at addr: set before the int3 is written, cleared after it is gone.
  std::atomic<bool> armed{false};
};

// Return stacks: per thread, the instances of return probes in flight.
inline constexpr uint32_t kRetDepth = 128;
inline constexpr uint32_t kDefaultMaxactive = 32;
inline constexpr uint32_t kMaxRetprobes = 4096;

struct RetprobeSlot {
  std::atomic<uint32_t> gen{0};
  std::atomic<Probe*> probe{nullptr};
};
RetprobeSlot* retprobe_slots();  // kMaxRetprobes entries

// Addresses the SIGTRAP hook knows: probe int3s and post-slot int3s. Insert-only.
enum class TrapKind : uint8_t { site = 0, post = 1 };
bool hit_table_insert(uint64_t addr, TrapKind kind, ProbeSite* site);

// Installs the trap hook and the return callbacks (idempotent; writers only).
void install_hit_path();

// SRCU over everything readers reach through ProbeSite::list and the retprobe slots:
// after srcu_synchronize() returns, no reader that could have seen a pointer
// unpublished before the call is still running.
void srcu_synchronize();

// Whether this thread is running a probe handler (detach from a handler would wait for
// itself).
bool in_probe_handler() noexcept;

// The detour's callback: runs the pre-handlers of `site` on `regs`; non-zero when one
// redirected execution (regs->rip).
int detour_dispatch(uint64_t site, arch::PtRegs* regs);

}  // namespace utramp::probe
