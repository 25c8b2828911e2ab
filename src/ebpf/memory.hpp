// What an untrusted program may touch, and how a run reports that it tried otherwise.
//
// Until the verifier exists nothing proves a program's pointers, so both engines check
// every access at run time (DESIGN §8: a faulting load returns zero, as the kernel's
// exception table makes it):
//
//   - an access inside an allowed region goes to memory directly: the run's stack
//     frames, the context (r1 at entry), and the static regions of the program's
//     environment (map values, global data: registered by the loader);
//   - a load anywhere else is a fault-safe copy (os::safe_read): the value if the
//     address is readable, zero if not, never a signal;
//   - a store or atomic anywhere else fails the run (FaultKind::bad_store) before
//     writing; an atomic must also be naturally aligned (a split lock may be fatal).
//
// A failed run returns 0 to its caller and records the fault in the RunStatus the
// caller gave (or the program's own, for calls from trampolines).
//
// Run state layout, shared by the interpreter and the generated code (which reads its
// fields at the fixed offsets below from r12):
//
//   +0   ctx_lo       the context: r1 at entry
//   +8   ctx_len      its bytes: r2 at entry (or the program's fixed context size)
//   +16  stack_lo     bottom of the deepest frame: kMaxFrames * 512 bytes of stack
//   +24  stack_hi     top of the main frame: r10 at entry
//   +32  min_fp       stack_lo + 512: the lowest frame pointer a local call may set
//   +40  budget       backward jumps left before FaultKind::loop_budget
//   +48  env          the program's RunEnv (static regions, helpers)
//   +56  status       where a fault is reported
//   +64  prev         the thread's enclosing run (current_run() nesting)
//   +72  fault_kind, +76 fault_insn, +80 fault_addr: the fault being reported
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ebpf/insn.hpp"

namespace utramp::ebpf {

struct Region {
  uint64_t lo = 0;
  uint64_t hi = 0;       // exclusive
  bool writable = false;
};

enum class FaultKind : uint32_t {
  none = 0,
  bad_store,          // store or atomic outside the writable regions
  misaligned_atomic,  // atomic at an address not a multiple of its size
  call_depth,         // a local call beyond kMaxFrames frames
  loop_budget,        // more backward jumps than the run's budget
  unknown_helper,     // callx to an id the table does not have
  wild_load,          // a load outside the program's memory (RunEnv::strict_memory only)
};
const char* fault_name(FaultKind k);

// Where a run's fault goes. Runs may share one (a program's default status, written by
// every thread that runs it): `faults` counts atomically, the last fault's details are
// stored with relaxed atomics (any one fault's, whole).
struct RunStatus {
  std::atomic<uint64_t> faults{0};
  std::atomic<uint64_t> last{0};       // kind | insn << 32
  std::atomic<uint64_t> last_addr{0};

  FaultKind kind() const { return static_cast<FaultKind>(last.load(std::memory_order_relaxed) & 0xffffffff); }
  uint32_t insn() const { return static_cast<uint32_t>(last.load(std::memory_order_relaxed) >> 32); }
  uint64_t addr() const { return last_addr.load(std::memory_order_relaxed); }
};

// Per loaded program: what the environment allows beyond a run's own stack and context.
struct RunEnv {
  std::vector<Region> regions;    // static: maps, global data
  bool ctx_writable = false;
  uint64_t ctx_size = 0;          // fixed context size; 0: given per run (r2)
  // Proven with no context (a memory context of 0 bytes: the verifier's r1 = NULL,
  // r2 = 0): every run starts so, whatever ctx and length the caller passes.
  bool no_ctx = false;
  uint64_t loop_budget = 0;       // 0: unlimited
  std::vector<uint64_t> callx;    // helper id -> function address (0: none)
  bool publish_run = false;       // a called helper needs current_run()
  bool strict_memory = false;     // interpreter: ExecOptions::strict_memory
};

struct RunState {
  uint64_t ctx_lo;
  uint64_t ctx_len;
  uint64_t stack_lo;
  uint64_t stack_hi;
  uint64_t min_fp;
  uint64_t budget;
  const RunEnv* env;
  RunStatus* status;
  RunState* prev;
  uint32_t fault_kind;
  uint32_t fault_insn;
  uint64_t fault_addr;
};
static_assert(sizeof(RunState) == 88);

// Offsets the generated code uses.
namespace rs {
inline constexpr int32_t kCtxLo = 0, kCtxLen = 8, kStackLo = 16, kStackHi = 24, kMinFp = 32,
                         kBudget = 40, kEnv = 48, kStatus = 56, kPrev = 64, kFaultKind = 72,
                         kFaultInsn = 76, kFaultAddr = 80;
}  // namespace rs
static_assert(offsetof(RunState, ctx_len) == rs::kCtxLen && offsetof(RunState, stack_lo) == rs::kStackLo &&
              offsetof(RunState, stack_hi) == rs::kStackHi && offsetof(RunState, min_fp) == rs::kMinFp &&
              offsetof(RunState, budget) == rs::kBudget && offsetof(RunState, env) == rs::kEnv &&
              offsetof(RunState, status) == rs::kStatus && offsetof(RunState, prev) == rs::kPrev &&
              offsetof(RunState, fault_kind) == rs::kFaultKind &&
              offsetof(RunState, fault_insn) == rs::kFaultInsn &&
              offsetof(RunState, fault_addr) == rs::kFaultAddr);

inline constexpr uint64_t kStackBytes = uint64_t(kStackSize) * kMaxFrames;

// Whether [addr, addr+n) lies in the run's stack, its context, or a static region
// (writable ones only when `write`).
bool run_allows(const RunState* r, uint64_t addr, uint64_t n, bool write) noexcept;

// The run of this thread's innermost program that calls a `needs_run` helper (null
// outside one). Helpers use it with run_allows() to check the pointers they are given.
RunState* current_run() noexcept;
// Engines only: publish/withdraw `r` as current (r->prev keeps the enclosing run).
void enter_run(RunState* r) noexcept;
void leave_run(RunState* r) noexcept;
// The thread-pointer-relative offset of the current-run slot (for generated code).
int64_t current_run_tls_offset() noexcept;

// The slow paths generated code calls (also the interpreter's paths):
extern "C" {
// A load of n (1, 2, 4, 8) bytes at addr: direct inside an allowed region, else a
// fault-safe copy; 0 when unreadable. Zero-extended.
uint64_t utramp_ebpf_load(RunState* r, uint64_t addr, uint64_t n) noexcept;
// 1 if a store of n bytes at addr is allowed, else 0.
uint64_t utramp_ebpf_store_ok(RunState* r, uint64_t addr, uint64_t n) noexcept;
// Publishes r->fault_* into r->status.
void utramp_ebpf_report(RunState* r) noexcept;
}

// "insn 7 (stxdw [%r1+8], %r2): store of 8 bytes at 0x1000 outside the program's
// writable memory": a fault described with its evidence.
std::string describe_fault(std::span<const Insn> insns, FaultKind kind, uint32_t insn, uint64_t addr);

}  // namespace utramp::ebpf
