#include "os/signal_stack.hpp"

#include <sys/syscall.h>

#include "arch/cpu.hpp"

namespace utramp::os {

namespace {

struct Known {
  bool known = false;
  SignalStack s;
};
__thread Known t_known __attribute__((tls_model("initial-exec")));

void set(const stack_t& ss) {
  const bool on = !(ss.ss_flags & SS_DISABLE) && ss.ss_size != 0;
  t_known.s.lo = on ? reinterpret_cast<uint64_t>(ss.ss_sp) : 0;
  t_known.s.hi = on ? t_known.s.lo + ss.ss_size : 0;
  t_known.known = true;
}

}  // namespace

SignalStack signal_stack() {
  if (!t_known.known) {
    stack_t ss{};
    // The kernel directly: this runs inside the tracer's hooks, and libc's sigaltstack
    // (the agent's interposer, then libc's) may be a traced function: calling it would
    // enter the hook again, which asks here again, before the answer is kept.
    if (arch::raw_syscall6(SYS_sigaltstack, 0, reinterpret_cast<long>(&ss)) == 0) set(ss);
    else t_known.known = true;  // none
  }
  return t_known.s;
}

void note_signal_stack(const stack_t& ss) { set(ss); }

bool holder_still_runs(uint64_t holder, uint64_t frame) {
  const SignalStack s = signal_stack();
  return s.holds(frame) == s.holds(holder) ? frame < holder : s.holds(frame);
}

}  // namespace utramp::os
