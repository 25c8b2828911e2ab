#include "ebpf/memory.hpp"

#include <fmt/format.h>

#include <cstring>

#include "arch/cpu.hpp"
#include "os/safe_copy.hpp"

namespace utramp::ebpf {

namespace {

thread_local RunState* t_current __attribute__((tls_model("initial-exec"))) = nullptr;

// [addr, addr+n) inside [lo, lo+len), without overflow for any addr.
inline bool inside(uint64_t addr, uint64_t n, uint64_t lo, uint64_t len) {
  return len >= n && addr - lo <= len - n;
}

}  // namespace

const char* fault_name(FaultKind k) {
  switch (k) {
    case FaultKind::none: return "none";
    case FaultKind::bad_store: return "bad_store";
    case FaultKind::misaligned_atomic: return "misaligned_atomic";
    case FaultKind::call_depth: return "call_depth";
    case FaultKind::loop_budget: return "loop_budget";
    case FaultKind::unknown_helper: return "unknown_helper";
    case FaultKind::wild_load: return "wild_load";
  }
  return "unknown";
}

bool run_allows(const RunState* r, uint64_t addr, uint64_t n, bool write) noexcept {
  if (inside(addr, n, r->stack_lo, r->stack_hi - r->stack_lo)) return true;
  if ((!write || r->env->ctx_writable) && inside(addr, n, r->ctx_lo, r->ctx_len)) return true;
  for (const Region& g : r->env->regions)
    if ((!write || g.writable) && inside(addr, n, g.lo, g.hi - g.lo)) return true;
  return false;
}

RunState* current_run() noexcept { return t_current; }

void enter_run(RunState* r) noexcept {
  r->prev = t_current;
  t_current = r;
}

void leave_run(RunState* r) noexcept { t_current = r->prev; }

int64_t current_run_tls_offset() noexcept {
  return static_cast<int64_t>(reinterpret_cast<uint64_t>(&t_current) - arch::thread_pointer());
}

extern "C" uint64_t utramp_ebpf_load(RunState* r, uint64_t addr, uint64_t n) noexcept {
  uint64_t v = 0;
  if (run_allows(r, addr, n, false)) std::memcpy(&v, reinterpret_cast<const void*>(addr), n);
  else os::safe_read(&v, addr, n);
  return v;
}

extern "C" uint64_t utramp_ebpf_store_ok(RunState* r, uint64_t addr, uint64_t n) noexcept {
  return run_allows(r, addr, n, true) ? 1 : 0;
}

extern "C" void utramp_ebpf_report(RunState* r) noexcept {
  r->status->last.store(r->fault_kind | (uint64_t(r->fault_insn) << 32), std::memory_order_relaxed);
  r->status->last_addr.store(r->fault_addr, std::memory_order_relaxed);
  r->status->faults.fetch_add(1, std::memory_order_relaxed);
}

std::string describe_fault(std::span<const Insn> insns, FaultKind kind, uint32_t insn, uint64_t addr) {
  std::string where = insn < insns.size()
                          ? fmt::format("insn {} ({})", insn, disassemble_insn(insns, insn))
                          : fmt::format("insn {}", insn);
  switch (kind) {
    case FaultKind::none: return where + ": no fault";
    case FaultKind::bad_store:
      return fmt::format("{}: store at {:#x} outside the program's writable memory", where, addr);
    case FaultKind::misaligned_atomic:
      return fmt::format("{}: atomic at {:#x} is not naturally aligned", where, addr);
    case FaultKind::call_depth:
      return fmt::format("{}: local call deeper than {} frames", where, kMaxFrames);
    case FaultKind::loop_budget:
      return fmt::format("{}: backward-jump budget exhausted (a loop that does not end?)", where);
    case FaultKind::unknown_helper:
      return fmt::format("{}: callx to helper {} which is not in the helper table", where, addr);
    case FaultKind::wild_load:
      return fmt::format("{}: load at {:#x} outside the program's memory", where, addr);
  }
  return where;
}

}  // namespace utramp::ebpf
