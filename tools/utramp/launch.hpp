// Starting a program under the agent: the one launcher of `record`, `run` and `hist`.
//
// What it guarantees:
//   - the program is checked first, and refused with the reason when the agent could not
//     be loaded into it (a statically linked program has no dynamic loader to preload
//     the agent; a set-user-ID, set-group-ID or file-capability program runs in the
//     loader's secure mode, which ignores LD_PRELOAD), so that it is never run silently
//     untraced; a script (#!) is checked through its interpreter, which is what runs;
//   - the agent's configuration is written into a directory the CLI made, readable by
//     the user only, and named to the agent by UTRAMP_AGENT;
//   - the program keeps the terminal: stdin, stdout and stderr, its own signal
//     dispositions (the CLI ignores SIGINT and SIGQUIT while it waits, so that Ctrl-C
//     reaches the program and the CLI lives to save what was recorded; the program gets
//     them as the CLI got them, SIGPIPE at its default), its signal mask, the CLI's
//     environment with LD_PRELOAD's own libraries after the agent, and its exit status;
//   - a program that cannot be executed is reported by the CLI (exec's errno is
//     posix_spawn's result), never by a message printed from the child.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/config.hpp"
#include "common/result.hpp"

namespace utramp::cli {

// The program a command line names, resolved and checked.
struct Target {
  std::string path;         // as execv is given it (PATH resolved like execvp)
  std::string binary;       // the ELF that runs: `path`, or a script's interpreter
  std::string interpreter;  // "" unless `path` is a #! script
};

// Resolves PROGRAM as execvp would and checks that the agent can be loaded into it.
// The error says why not (no such file, not executable, statically linked, secure mode).
Result<Target> resolve_target(const std::string& program);

// A script run through env(1) (`#!/usr/bin/env bash`: pyenv's and rbenv's shims, many
// installed tools): env only execs the interpreter, which runs untraced unless exec is
// followed. The note that says so ("" when it does not apply).
std::string unfollowed_exec_note(const Target& t, bool follow_exec);

// The agent library (libutramp-agent.so) for this CLI, in its build tree or where it is
// installed; the first place looked at when it is in neither (for the message).
std::string agent_library();
// The same for another library of the CLI's, installed beside the agent
// (libutramp-metrics.so).
std::string cli_library(std::string_view file);

// A directory of the CLI's own (mode 0700, under $TMPDIR or /tmp), removed with all it
// holds when the object goes (or sooner, by remove()). Named PREFIX-PID-XXXXXX (PID: the
// CLI's) and locked (flock) while the object lives, so that one left behind by a CLI
// that was killed is known as such: the next CLI that starts a program removes it
// (sweep_stale_scratch()).
class ScratchDir {
 public:
  static Result<ScratchDir> create(const std::string& prefix);
  ScratchDir(ScratchDir&& o) noexcept : path_(std::move(o.path_)), lock_fd_(o.lock_fd_) {
    o.path_.clear();
    o.lock_fd_ = -1;
  }
  ScratchDir& operator=(ScratchDir&&) = delete;
  ScratchDir(const ScratchDir&) = delete;
  ~ScratchDir();
  const std::string& path() const { return path_; }
  // Removes it now (nothing in it is needed any more); path() is empty after.
  void remove();

 private:
  ScratchDir(std::string p, int fd) : path_(std::move(p)), lock_fd_(fd) {}
  std::string path_;
  int lock_fd_ = -1;
};

// Removes the scratch directories (utramp-run-PID-*, utramp-hist-PID-*, under $TMPDIR or
// /tmp) of CLIs that are gone: owned by this user, PID not running, not locked; and the
// ring buffer files older versions left in /dev/shm (utramp-PID-N.buffers) the same way.
// Called when a program is started.
void sweep_stale_scratch();

// How the program ended.
struct Ended {
  int exit_code = 0;     // what the CLI exits with: the status, or 128 + signal
  std::string how;       // trace::exit_description: "exited 0", "killed by SIGSEGV (core dumped)"
  bool signaled = false;
  int status = 0;        // as waitpid gave it
};

class Launch {
 public:
  // Writes `config` to CONFIG_PATH (0600, a new file), then runs TARGET with ARGV (argv[0]
  // as the user wrote it) and the agent preloaded.
  static Result<Launch> start(const Target& target, const std::vector<std::string>& argv,
                              const agent::Config& config, const std::string& config_path);
  Launch(Launch&& o) noexcept;
  Launch& operator=(Launch&&) = delete;
  ~Launch();

  pid_t pid() const { return pid_; }
  // Waits for the program to end, calling `work` between checks; `work` returns whether
  // it did something (if not, the wait sleeps `idle_ms` before the next check). The
  // CLI keeps ignoring SIGINT and SIGQUIT until this object goes (it may still be
  // saving what the program's children record).
  Ended wait(const std::function<bool()>& work, int idle_ms);

 private:
  Launch() = default;
  void restore_signals();
  pid_t pid_ = -1;
  bool restore_ = false;              // the CLI's dispositions below are to be restored
  struct sigaction old_int_{}, old_quit_{};
};

}  // namespace utramp::cli
