// The files the agent writes into the trace directory for the process it runs in
// (docs/trace-format.md): functions-PID.tsv, maps-PID.txt and process-PID.json, through
// the trace module's writers (src/trace/trace_dir.hpp), the one definition of their
// formats. Called at start-up, after a dlopen, in a forked child and at exit: never on
// a hit path. Errors are returned for the agent's log. Every file is written relative to
// the trusted directory, checked again at each write (agent/trust.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/trust.hpp"
#include "common/result.hpp"
#include "trace/trace_dir.hpp"

namespace utramp::agent {

class ProcessFiles {
 public:
  // A program image starts under the agent, DIR being the trace directory (null or
  // empty: no files; it must outlive this). It is the process `record` started (parent
  // 0), or one a traced process started that runs under the agent through
  // --follow-exec (its parent has a process file), or a traced process that exec'd (its
  // own file is there and not ended: the same process, with a new command; the files
  // of the program before are kept as its image's: trace::keep_image_files).
  Result<void> started(const TrustedDir* dir);
  // In a forked child: a process of its own, whose parent is the one forked from.
  Result<void> forked();
  // exit() was called with STATUS. How a process that `record` did not start ended is
  // known only then: `_exit`, signals and exec without --follow-exec leave it unknown.
  Result<void> exiting(int status);
  // Functions traced since the last call: the symbol file is rewritten with all of them
  // (not when there are none and it was written).
  Result<void> traced(std::vector<trace::Function> more);
  // The process's mappings now (after start-up, a dlopen, a fork).
  Result<void> write_maps() const;

 private:
  Result<void> write_functions() const;
  // F(dirfd) with a checked descriptor of the directory (none: not called).
  template <class F>
  Result<void> in_dir(F f) const;
  const TrustedDir* dir_ = nullptr;
  trace::ProcessInfo process_;
  std::vector<trace::Function> functions_;
  bool functions_written_ = false;  // this process's file has functions_ (traced())
};

}  // namespace utramp::agent
