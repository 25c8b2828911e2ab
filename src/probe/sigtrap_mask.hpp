// Which threads keep SIGTRAP blocked (docs/sites.md, "SIGTRAP must stay deliverable").
//
// A thread that executes an int3 while it blocks SIGTRAP is not sent a signal it could
// handle: the kernel unblocks SIGTRAP, resets its action to the default and delivers it,
// which dumps core and ends the whole process. No handler runs, so nothing in the process
// can save it afterwards; what can be done is to look before an int3 is left in place,
// and to say which threads were seen blocking it. Under the agent the program's own calls
// of sigprocmask and pthread_sigmask never block it; the raw rt_sigprocmask system call
// (and glibc's internal uses of it) does, unseen.
//
// The kernel shows each thread's mask in /proc/PID/task/TID/status (SigBlk). A thread
// waiting in a system call that takes a mask for the time it waits (rt_sigsuspend,
// pselect6, ppoll, epoll_pwait, epoll_pwait2: /proc/PID/task/TID/syscall) shows that
// mask, which it drops when it returns: it is not counted. Not for hit paths: it reads
// files.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace utramp::probe {

struct BlockingThread {
  uint32_t tid = 0;
  std::string name;     // comm
  uint64_t sigblk = 0;  // its SigBlk (bit N-1: signal N)
};

// The threads of process PID (0: this one) that block SIGTRAP now.
Result<std::vector<BlockingThread>> threads_blocking_sigtrap(pid_t pid = 0);

// Those of this process seen blocking SIGTRAP in each of a few looks over about ten
// milliseconds: glibc blocks every signal for a moment while it creates a thread or
// forks, which is no danger (only its own code runs then), and such a thread is not
// named. Returns at the first look that finds none.
Result<std::vector<BlockingThread>> threads_keeping_sigtrap_blocked();

// Whether a SIGTRAP is pending in a thread of this process (SigPnd) or in the process
// (ShdPnd): generated and not delivered yet.
Result<bool> sigtrap_pending();

// "thread 1234 (worker, SigBlk 0000000000000020)", joined by ", ".
std::string describe(const std::vector<BlockingThread>& threads);

}  // namespace utramp::probe
