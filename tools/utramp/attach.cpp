#include "attach.hpp"

#include <fmt/format.h>

#include "launch.hpp"
#include "os/inject.hpp"

namespace utramp::cli {

int run_record_attach(pid_t pid, const RecordOptions& o) {
  if (!o.command.empty()) {
    fmt::print(stderr, "utramp record: -p attaches to a running process: give no program as well\n");
    return 2;
  }
  // Every refusal that needs no ptrace, before the process is touched.
  auto facts = os::check_attachable(pid);
  if (!facts) {
    fmt::print(stderr, "utramp record: cannot attach: {}\n", facts.error().message);
    return 2;
  }
  const std::string agent = agent_library();
  auto loaded = os::inject_library(pid, agent);
  if (!loaded) {
    fmt::print(stderr, "utramp record: cannot attach to process {}: {}\n", pid, loaded.error().message);
    return 2;
  }
  if (!loaded->handle) {
    // The loader's own reason. The common one: the agent's initial-exec thread-local
    // storage (the trampolines' per-thread counters, the tracer's state, reached at a
    // fixed offset from the thread pointer by generated code) does not fit in the
    // reserve glibc sets aside at start-up for libraries loaded later.
    const bool tls = loaded->error.find("static TLS") != std::string::npos;
    fmt::print(stderr,
               "utramp record: cannot attach to process {}: its dynamic loader refused the agent: "
               "{}{}; the process was paused {:.2f} ms ({} threads) and runs on unchanged\n",
               pid, loaded->error,
               tls ? " (the agent's initial-exec thread-local storage, about 21 KB, does not fit in "
                     "the C library's small static reserve for libraries loaded into a running "
                     "process: docs/attach.md, \"Status\")"
                   : "",
               static_cast<double>(loaded->pause_ns) / 1e6, loaded->threads);
    return 2;
  }
  // Loaded, but this agent has no way yet to be configured in a running process (the
  // control channel of docs/attach.md, "Status"): said, not pretended.
  fmt::print(stderr,
             "utramp record: the agent was loaded into process {} but cannot be configured there: "
             "attaching stops at loading in this version (docs/attach.md, \"Status\"); the agent "
             "stays loaded and inert\n",
             pid);
  return 2;
}

}  // namespace utramp::cli
