// Running a program under the agent and saving its trace: shared by `record` and `hist`.
#pragma once

#include <CLI/CLI.hpp>

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/config.hpp"
#include "launch.hpp"
#include "trace/shm_buffers.hpp"
#include "trace/trace_dir.hpp"

namespace utramp::cli {

struct RecordOptions {
  std::string output = "utramp.data";
  agent::Config agent;               // filters, depth, captures... (paths filled in)
  uint32_t events_per_buffer = 1u << 18;  // 8 MiB per thread, touched as used
  uint32_t max_buffers = 256;
  // block (the default): a thread whose ring is full waits for the recorder's next
  // drain pass (bounded: trace::wait_for_room()), so nothing is lost while the recorder
  // runs; discard: a full ring drops; overwrite: flight recorder. Block by default: on
  // a busy machine the recorder's wake-ups come late and discard lost up to 3-9 % of a
  // call-heavy run (docs/benchmarks.md, "Nothing lost by default").
  trace::BufferMode mode = trace::BufferMode::block;
  // The events files: plain records, or zstd frames written by the recorder as it
  // drains (the target never compresses), on a thread of its own (trace::WriteQueue).
  // Not zstd by default: it loses no more than plain files, but took more CPU and wall
  // time on a busy machine (docs/benchmarks.md, "Compressed traces and losses").
  trace::Compression compression = trace::Compression::none;
  bool quiet = false;                // no summary line
  // How long to wait, once the program ended, for the processes it started that are
  // traced (forked children...); < 0: as long as they run. Those still running then
  // are said to be cut.
  double wait_children_s = 10;
  std::vector<std::string> command;  // PROGRAM ARGS
};

struct RecordResult {
  int exit_code = 0;                 // what `utramp record` exits with
  std::string ended;                 // "exited 0", "killed by SIGSEGV"...
  uint64_t events = 0, lost = 0;     // recorded (drained from the rings), lost in the rings
  uint64_t saved = 0;                // of `events`, those the trace holds
  std::string cut;                   // why the trace was cut ("" when it was not)
};

// What `record` exits with when the trace could not be saved whole (a full disk, an
// info.json that cannot be written): EX_IOERR of sysexits.h. The target's status is in
// the summary line and the trace.
inline constexpr int kExitSaveFailed = 74;

// Returns the target's exit status as the CLI should exit with, kExitSaveFailed when the
// trace was cut, or a CLI error (> 0 with the message printed) before anything ran.
int run_record(const RecordOptions& o, RecordResult* out);

// What a recording records: the program `record` starts (Launch), or a running process
// it attached to (`record -p`, attach.cpp). The recorder (record()) is the same for both.
class RecordTarget {
 public:
  virtual ~RecordTarget() = default;
  virtual pid_t pid() const = 0;
  // Calls `work` (the recorder's drain) until the recording of this process ends: the
  // program exited, or the attached one was detached from. As Launch::wait.
  virtual Ended wait(const std::function<bool()>& work, int idle_ms) = 0;
};
// Starts the target with the agent configuration CFG (the launcher writes it to
// CONFIG_PATH), or says why not and sets *exit_code.
using StartTarget = std::function<std::unique_ptr<RecordTarget>(const agent::Config& cfg,
                                                                const std::string& config_path,
                                                                int* exit_code)>;
// The recorder: creates the trace directory (0700, the user's) and the rings (an
// anonymous file, 0600), starts the target with START, drains until it ends, and saves
// the trace. INFO holds what is known of the target (command, binary, build id).
int record(const RecordOptions& o, trace::TraceInfo info, const StartTarget& start, RecordResult* out);

// The options of `record` as given (`record` and `live` take the same ones).
struct RecordFlags {
  RecordOptions rec;
  std::vector<std::string> args, rets;  // -A, -R
  std::string time_filter, mode = "block", wait_children = "10", compress = "none";
};
// Adds record's options to SUB (all but -q); finish_record_flags() checks and converts
// them once parsed, printing what is wrong as `utramp CMD: ...` (false: exit 2).
std::shared_ptr<RecordFlags> add_record_options(CLI::App* sub);
bool finish_record_flags(RecordFlags& f, const char* cmd);

// "10us", "1.5ms", "2s", "300" (ns) -> ns; false if malformed.
bool parse_duration(const std::string& s, uint64_t* ns);

// --wait-children: "SECONDS" (a decimal number, at most a year) or "forever" (-1).
bool parse_wait(const std::string& s, double* seconds);

}  // namespace utramp::cli
