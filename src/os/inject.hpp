// Loading a shared library into a running process, as debuggers and Frida do: every
// thread is stopped with ptrace (PTRACE_SEIZE, then PTRACE_INTERRUPT), one of them is
// made to call the C library's dlopen, and everything is put back and the tracer leaves.
//
// The protocol, in order:
//   1. checks that need no ptrace (check_attachable): the process exists and is not a
//      zombie, no other tracer is attached (TracerPid), it did not set the lockdown
//      (UTRAMP_LOCKDOWN=1 in the environment it was started with), it is x86-64, and it
//      has a dynamic loader and a dlopen (found in its libc's symbol table: `dlopen`
//      since glibc 2.34, else libdl's, else `__libc_dlopen_mode`);
//   2. every thread is seized and interrupted; the list of /proc/PID/task is read again
//      until a pass finds no thread it did not stop (threads created meanwhile);
//   3. one thread is chosen (the main thread if it is blocked in a system call other
//      than futex, else another one that is, else the main thread: a thread stopped
//      inside malloc or the loader would deadlock in dlopen); its general registers and
//      its whole extended state (NT_X86_XSTATE) are saved;
//   4. the call: below its stack pointer (past the 128-byte red zone) the library's path
//      is written and a return address 0; rip = dlopen, rdi = the path, rsi = RTLD_NOW,
//      orig_rax = -1 (an interrupted system call is not restarted into the call). The
//      thread runs until it returns to address 0, where the fault (SIGSEGV at 0, never
//      delivered) stops it; rax is the handle. On a null handle dlerror is called the
//      same way for the loader's message. A signal that arrives meanwhile is delivered
//      to the thread as it would have been;
//   5. the registers and extended state are put back (a system call it was interrupted
//      in is restarted by the kernel as after any signal), and every thread is detached,
//      each with the signal it was stopped for if that was not ours: no ptrace stays.
//
// Only the chosen thread runs during 4, the others stay stopped: the pause is the time
// from the first interrupt to the last detach (Injected::pause_ns).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace utramp::os {

// The variable that forbids attaching, in the environment a process was started with
// (as the kernel's lockdown forbids changing the running kernel): "1" refuses.
inline constexpr const char* kLockdownVar = "UTRAMP_LOCKDOWN";

// What is known of a process before it is touched; the error, why it cannot be
// attached to (Errc::not_found: no such process; unsupported: the rest).
struct ProcessFacts {
  pid_t pid = 0;
  std::string exe;         // /proc/PID/exe
  std::string libc;        // the path of the C library it maps, as its maps name it
  uint64_t dlopen = 0;     // where dlopen is in it
  uint64_t dlerror = 0;    // 0 when not found (the loader's message is then not shown)
  std::string dlopen_name; // the symbol used ("dlopen", "__libc_dlopen_mode")
  size_t threads = 0;
};
Result<ProcessFacts> check_attachable(pid_t pid);

// Why ptrace may not attach to PID, for an EPERM: the Yama setting
// (/proc/sys/kernel/yama/ptrace_scope) that forbids it, a different owner, or a
// process that is not dumpable. Empty when none of these explains it.
std::string ptrace_refusal(pid_t pid);

struct Injected {
  uint64_t handle = 0;     // dlopen's result in the target (0: it failed)
  std::string error;       // the target's dlerror() when it failed
  uint64_t pause_ns = 0;   // from the first interrupt to the last detach
  size_t threads = 0;      // threads stopped
  pid_t tid = 0;           // the thread that made the call
};

// Loads LIBRARY (an absolute path, readable by the target) into PID by the protocol
// above. An error means the process was not changed (nothing was written, or all was
// put back), except when it says that the call did not return within TIMEOUT_MS: the
// thread is then left running dlopen and the others are released.
Result<Injected> inject_library(pid_t pid, const std::string& library, int timeout_ms = 10000);

// Takes SIG out of the blocked set of each thread TIDS names (threads of PID), stopping
// only those threads for the change, as for an injection (PTRACE_SEIZE and
// PTRACE_INTERRUPT, PTRACE_GETSIGMASK and PTRACE_SETSIGMASK, detach): no ptrace stays.
// A system call a thread was in is restarted as after an injection. Returns the threads
// whose mask changed (a thread that ended meanwhile, or that no longer blocked SIG, is
// not among them); a thread id of another live process is refused. A thread waiting in a call that takes a mask for the wait
// (rt_sigsuspend, ppoll, pselect6) gets SIG out of that mask only.
Result<std::vector<pid_t>> unblock_signal(pid_t pid, const std::vector<pid_t>& tids, int sig);
// The reverse, the same way: puts SIG back into the blocked set of each thread TIDS names
// that does not block it (a refused attach undoes unblock_signal with it). Returns the
// threads whose mask changed.
Result<std::vector<pid_t>> block_signal(pid_t pid, const std::vector<pid_t>& tids, int sig);

}  // namespace utramp::os
