// Probes at any instruction (DESIGN §7): the kernel's kprobes, kretprobes and optprobes
// for user space.
//
//   attach(addr, pre, post)   int3 over the instruction's first byte. The trap runs every
//                             pre-handler at that address (several probes share a site,
//                             in attach order); the displaced instruction then runs from
//                             an out-of-line slot within ±2 GB (control flow is emulated
//                             instead); a post-handler gets a second trap after it. A
//                             pre-handler returning non-zero after changing regs->rip
//                             skips the instruction (the kernel's contract).
//   attach_retprobe(func)     an entry probe that replaces the return address with the
//                             return trampoline, bounded per thread by maxactive.
//   (automatic)               where the 5 bytes at a probe cover whole instructions that
//                             can run from elsewhere, and no probe with a post-handler is
//                             there, the int3 becomes a jmp to a detour: no trap.
//
// Handlers see regs->rip == the probed address (pre), the address execution continues at
// (post), or the original return address (return handler), and may change any register;
// rip (and rsp) changes take effect in a pre-handler only when it returns non-zero.
// Handlers must not throw. They may call probed code: a probe hit while a handler runs
// on the same thread runs no handler and counts a miss.
//
// Refusals say what, where and why, and change nothing: an address inside an
// instruction (proven by decoding from the function start), in the blacklist (the
// runtime itself, __restore_rt, what the trap path calls, sanitizer runtimes), on a
// non-executable page, an instruction that cannot run out of line, bytes already changed
// by someone else (compared with the object's file).
//
// Detach takes effect at once and returns when no handler of the probe is running any
// more (an SRCU grace period); the slot and detour of the address stay for reuse.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "arch/probe.hpp"
#include "common/result.hpp"

namespace utramp::probe {

struct Probe;  // opaque handle

using Handler = arch::ProbeHandler;

struct ProbeSpec {
  uint64_t addr = 0;
  Handler pre = nullptr;
  Handler post = nullptr;
  uint64_t cookie = 0;
  bool keep_int3 = false;  // never jump-optimise this probe's site (benchmarks, tests)
  // Code the handlers call through a pointer in a register (a JIT-ed program): with
  // these, the proof that a handler touches only general-purpose registers (then no
  // vector state is saved around it: docs/probes.md, "Vector state") follows each such
  // call made by the handler function itself to every address here, as it follows
  // direct calls; without them, or for such a call anywhere else, the proof fails and
  // the extended state is saved. The caller vouches that these are all the handler's
  // own pointer calls can reach; what they reach is proven like the rest.
  std::vector<uint64_t> handler_calls;
  // Count the probe's hits (ProbeInfo::hits): a locked instruction on every hit, shared
  // by all threads. A caller that counts its own runs turns it off (utramp run's uprobe
  // programs: their run counters); hits then stay 0. Misses are always counted.
  bool count_hits = true;
};

struct RetprobeSpec {
  uint64_t func = 0;
  Handler entry = nullptr;  // non-zero return: this call is not recorded
  Handler ret = nullptr;    // regs->rax/rdx hold the return value
  uint64_t cookie = 0;
  int maxactive = 0;        // instances per thread; <= 0: the default (32), at most 128
  bool keep_int3 = false;
  std::vector<uint64_t> handler_calls;  // as ProbeSpec's
};

enum class State : uint8_t { int3, optimised };
std::string_view state_name(State s) noexcept;

struct ProbeInfo {
  uint64_t id = 0;
  bool retprobe = false;
  uint64_t addr = 0;
  std::string symbol;         // "func+0x12"
  std::string object;         // path of the ELF object
  State state = State::int3;
  std::string not_optimised;  // why the site is an int3 ("" when optimised)
  bool pre = false, post = false;
  // The handlers were proven to touch only general-purpose registers: no vector state
  // is saved around them (pre: the pre/entry handler; post: the post/return handler).
  bool pre_gprs_only = false, post_gprs_only = false;
  uint64_t hits = 0, misses = 0;
  int maxactive = 0;          // return probes
  uint64_t cookie = 0;
};

class Manager {
 public:
  static Manager& instance();

  Result<Probe*> attach(const ProbeSpec& spec);
  // All or none, with one patch batch.
  Result<std::vector<Probe*>> attach_batch(std::span<const ProbeSpec> specs);
  // func+offset by symbol name.
  Result<uint64_t> resolve(const std::string& symbol, uint64_t offset);
  Result<Probe*> attach_retprobe(const RetprobeSpec& spec);

  Result<void> detach(Probe* probe);
  Result<void> detach_batch(std::span<Probe* const> probes);

  // Whether a probe can be placed at `addr`, and the state it would get now; the target
  // is not changed.
  Result<State> check(uint64_t addr);

  // Every attached probe, by address.
  std::vector<ProbeInfo> list();

  // Jump optimisation on (default) or off for every site (like the kernel's
  // debug.kprobes-optimization); applied to the attached probes at once.
  Result<void> set_optimization(bool on);
  bool optimization() const;

  struct Impl;

 private:
  Manager();
  Impl* impl_;
};

// For unwinders (bpf_get_stack): the real return address of the frame whose return
// address at `slot` reads `ra`. A return probe's trampoline there is replaced by the
// address its instance on this thread keeps (the first one that is not the trampoline
// again, when several return probes chained on one frame); 0 when the thread has no
// instance for that slot. Any other `ra` is given back as it is. Async-signal-safe; reads
// the thread's return stack and changes nothing.
uint64_t real_return_address(uint64_t ra, uint64_t slot) noexcept;

// The listing as aligned text: ADDRESS SYMBOL STATE HITS MISSES, one probe per line.
std::string format_listing(const std::vector<ProbeInfo>& probes);

}  // namespace utramp::probe
