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
    // The loader's own reason. "static TLS": the agent's initial-exec thread-local
    // storage (a few pointers: tests/unit/boundary.cmake keeps it under 256 bytes) no
    // longer fits in the reserve glibc sets aside at start-up for libraries loaded
    // later, other libraries loaded that way having taken it.
    const bool tls = loaded->error.find("static TLS") != std::string::npos;
    fmt::print(stderr,
               "utramp record: cannot attach to process {}: its dynamic loader refused the agent: "
               "{}{}; the process was paused {:.2f} ms ({} thread{}) and runs on unchanged\n",
               pid, loaded->error,
               tls ? " (what is left of the C library's static TLS reserve for libraries loaded "
                     "into a running process is smaller than the agent's few hundred bytes: "
                     "docs/attach.md)"
                   : "",
               static_cast<double>(loaded->pause_ns) / 1e6, loaded->threads,
               loaded->threads == 1 ? "" : "s");
    return 2;
  }
  // Loaded. Without the launcher's configuration the agent does nothing (no site
  // patched, no thread started), and there is no way yet to hand it one in a running
  // process (the control channel of docs/attach.md, "Status"): said, not pretended.
  fmt::print(stderr,
             "utramp record: the agent was loaded into process {} (paused {:.2f} ms, {} thread{}), "
             "but nothing is traced: this version cannot yet configure an agent in a running "
             "process (docs/attach.md, \"Status\"); the agent stays loaded and inert (no site "
             "patched, no thread started) and the process runs on unchanged\n",
             pid, static_cast<double>(loaded->pause_ns) / 1e6, loaded->threads,
             loaded->threads == 1 ? "" : "s");
  return 2;
}

}  // namespace utramp::cli
