// `utramp run` in the target: loads the eBPF objects the configuration names, maps the
// map file the CLI created, JIT-compiles every program and attaches it with one
// Manager::attach_many batch.
#pragma once

#include <string>

#include "agent/config.hpp"
#include "common/result.hpp"

namespace utramp::agent {

// All or nothing: on error every link made is detached again and the message says what
// and where (the caller reports it and ends the target before main).
Result<void> bpf_start(const Config& cfg);

// bpf_start(), its outcome written to cfg.bpf_status_file ("ok", or "error: ..."); on
// error the target exits with status 125 before main runs (never started).
void bpf_start_or_exit(const Config& cfg);

}  // namespace utramp::agent
