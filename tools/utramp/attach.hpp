// `utramp record -p PID`: attaching to a running process (docs/attach.md).
#pragma once

#include <sys/types.h>

#include "record_run.hpp"

namespace utramp::cli {

// Checks PID (os::check_attachable: every refusal with its reason), then loads the agent
// into it (os::inject_library). Returns the exit code, with the message printed.
int run_record_attach(pid_t pid, const RecordOptions& o);

}  // namespace utramp::cli
