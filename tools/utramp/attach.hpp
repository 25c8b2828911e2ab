// `utramp record -p PID`: attaching to a running process (docs/attach.md).
#pragma once

#include <sys/types.h>

#include "record_run.hpp"

namespace utramp::cli {

// Checks PID (os::check_attachable: every refusal with its reason), loads the agent into
// it (os::inject_library) unless it is there already, sends it the recording's
// configuration over the control channel and records (record(), the recorder of a
// launched program) until Ctrl-C, DURATION_S seconds (0: no limit), or the process's
// exit or exec; then detaches. Returns the exit code, with the message printed.
int run_record_attach(pid_t pid, const RecordOptions& o, double duration_s, RecordResult* out);

// The program process PID runs (/proc/PID/exe), "" when it cannot be read.
std::string program_of(pid_t pid);

}  // namespace utramp::cli
