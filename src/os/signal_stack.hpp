// Where this thread's alternate signal stack is (sigaltstack), without a system call on
// the paths that need it: tracer and trampoline code that must tell a signal handler
// running on that stack from code a handler left by longjmp. A system call there would
// also be where a pending signal is delivered.
//
// Asked of the kernel once per thread, then kept up to date by note_signal_stack(),
// which the agent calls from its sigaltstack() (a program that changes its signal stack
// by a raw system call, or in-process use without the agent, is not followed).
// Async-signal-safe: plain per-thread data, read and written by this thread only.
#pragma once

#include <signal.h>

#include <cstdint>

namespace utramp::os {

struct SignalStack {
  uint64_t lo = 0, hi = 0;  // [lo, hi), empty when the thread has none
  bool holds(uint64_t a) const { return a >= lo && a < hi; }
};

SignalStack signal_stack();
void note_signal_stack(const stack_t& ss);

// Whether code that took a per-thread guard with its stack pointer `holder` still runs
// below a new call whose frame is `frame` (the new call is nested: a signal handler
// that interrupted it, or its own call), or was left by a signal handler's longjmp. The
// same stack: nested when below it. Different stacks: nested when the new call is on
// the signal stack (a handler there), left otherwise.
bool holder_still_runs(uint64_t holder, uint64_t frame);

}  // namespace utramp::os
