// `utramp record -p PID`: attaching to a running process (docs/attach.md).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "record_run.hpp"

namespace utramp::cli {

// Checks PID (os::check_attachable: every refusal with its reason), loads the agent into
// it (os::inject_library) unless it is there already, sends it the recording's
// configuration over the control channel and records (record(), the recorder of a
// launched program) until Ctrl-C, DURATION_S seconds (0: no limit), or the process's
// exit or exec; then detaches. Returns the exit code, with the message printed.
int run_record_attach(pid_t pid, const RecordOptions& o, double duration_s, RecordResult* out);

// The pieces of run_record_attach that `utramp run -p` shares (cmd_run.cpp), ME naming
// the command in messages ("utramp run"):
// - every refusal before the process is touched (os::check_attachable), and, for a
//   RECORDING, an agent there already that cannot take one now (started under utramp
//   record or run, or another recording attached: one recording at a time; `run -p`
//   clients go side by side with it and each other). 0, or the exit code with the
//   message printed;
int check_attach(pid_t pid, const std::string& me, bool recording);
// - the agent loaded unless it is there (os::inject_library), CFG sent over the control
//   channel (apply_config) and its answer put in *ANSWER; null with the reason printed
//   when it was refused (nothing changed). The target's wait() calls the caller's work
//   until Ctrl-C (or SIGTERM), DURATION_S seconds (0: no limit), or the process's exit or
//   exec, then releases what it made (nothing of another client's); the agent does so
//   too when this connection ends otherwise.
std::unique_ptr<RecordTarget> attach_configured(pid_t pid, const agent::Config& cfg, double duration_s,
                                                const std::string& me, nlohmann::json* answer);

// --duration TEXT of `record -p` and `run -p` (empty: none) into *SECONDS (0: until
// Ctrl-C); false, with the reason printed as ME's, when it is malformed or given without
// -p PID.
bool parse_attach_duration(const std::string& text, pid_t pid, const std::string& me, double* seconds);

// The program process PID runs (/proc/PID/exe), "" when it cannot be read.
std::string program_of(pid_t pid);

}  // namespace utramp::cli
