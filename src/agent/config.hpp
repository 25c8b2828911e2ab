// The agent's configuration, written by `utramp record` as JSON and read by the agent
// in the traced process (UTRAMP_AGENT=path).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace utramp::agent {

struct ArgSpec {
  std::string glob;           // functions it applies to
  std::vector<std::string> args;  // "arg1", "arg2/s", "arg3/x" (parse_arg_capture)
  bool retval = false;        // -R
  std::string retfmt;         // "", "d", "s", "x", "f" (parse_value_format)
};

// The forms of -A and -R, in one place: the CLI refuses what these refuse, the agent
// reads what they accept. A value is shown as d (a signed integer, the default),
// x (a pointer), s (a C string) or f (a double).
inline constexpr int kMaxArgIndex = 16;      // argN: N in 1..16
inline constexpr int kMaxArgsPerFunction = 8;
struct ArgCapture {
  uint8_t index = 0;  // 0-based
  char format = 'd';
};
Result<ArgCapture> parse_arg_capture(const std::string& text);  // "argN[/F]"
Result<char> parse_value_format(const std::string& text);       // "" (d) or one of d x s f

struct Config {
  std::string shm_path;       // the shared buffers file
  std::string trace_dir;      // where functions-PID.tsv go
  std::string tracer = "function_graph";
  std::vector<std::string> filters;   // -F: only these (globs: symbols/glob.hpp)
  std::vector<std::string> notrace;   // -N: never these
  bool libraries = false;             // trace shared libraries' functions too
  uint32_t max_depth = 0;
  uint64_t min_duration_ns = 0;
  double ticks_per_ns = 1.0;
  std::vector<uint32_t> tids;
  std::vector<ArgSpec> captures;      // -A / -R
  bool follow_exec = false;
  // `utramp run`: eBPF objects to load and attach (agent/bpf.cpp), the map file the CLI
  // created for them, and where the agent reports a failed start (tracer "none": no
  // function tracer, no trace buffers).
  std::vector<std::string> bpf_objects;
  std::vector<std::string> bpf_attach;  // --attach PROG=SPEC, as given (ebpf::parse_attach_spec)
  // --allow-override: bpf_override_return may skip any function a uprobe program is at,
  // not only those marked UTRAMP_ALLOW_ERROR_INJECTION (ebpf::check_override).
  bool bpf_allow_override = false;
  std::string bpf_map_file;
  std::string bpf_status_file;
};

// The configuration in TEXT (the file's contents; SHOWN names it in errors). The agent
// reads the file only through load_trusted_config (agent/trust.hpp), which checks who
// made it first.
Result<Config> parse_config(const std::string& text, const std::string& shown);
std::string dump_config(const Config& c);  // JSON text

}  // namespace utramp::agent
