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
  std::vector<std::string> args;  // "arg1", "arg2/s", "fparg1" (parse_arg_capture)
  bool retval = false;        // -R, or "retval" in -A's list
  std::string retfmt;         // "", "d", "u32", "f" ... (parse_value_format)
};

// The forms of -A and -R, in one place (uftrace's): the CLI refuses what these refuse,
// the agent reads what they accept.
//
//   value format   d or i (signed), u (unsigned), x (hex), s (C string), c (char),
//                  f (floating point); d i u x with a width of 8, 16, 32 or 64 bits
//                  (i32, u8, x64), f with 32 (float) or 64 (double)
//   argument       argN[/F] (the Nth integer-class argument: rdi, rsi, ... then the
//                  stack), fpargN[/F] (the Nth floating-point argument: xmm0..xmm7);
//                  argN/f is fpargN, as in uftrace (the SysV ABI counts the two apart)
//
// A format without a width takes it from the argument's C type when DWARF describes the
// function (int: 32 bits, signed), else 64 bits (f: a double). Without a format, the C
// type decides the format too (unsigned, char, float, pointer...); without DWARF it is d.
inline constexpr int kMaxArgIndex = 16;      // argN: N in 1..16, fpargN: 1..8
inline constexpr int kMaxFpArgIndex = 8;
inline constexpr int kMaxArgsPerFunction = 8;
struct ValueSpec {
  char cls = 0;       // 0 (from the C type), 'd', 'u', 'x', 's', 'c', 'f'
  uint8_t bits = 0;   // 0 (from the C type), 8, 16, 32, 64
};
struct ArgCapture {
  uint8_t index = 0;  // 0-based, among the integer or the floating-point arguments
  bool fp = false;    // fpargN (or argN/f)
  ValueSpec spec;
};
Result<ArgCapture> parse_arg_capture(const std::string& text);  // "argN[/F]", "fpargN[/F]"
Result<ValueSpec> parse_value_format(const std::string& text);  // "" or a format above
// What the formats are, for messages that refuse one.
inline constexpr const char* kValueFormats =
    "d i u x s c f, or d i u x with a width of 8 16 32 64 bits (i32, u8, x64), or f32 f64";

struct Config {
  std::string shm_path;       // the shared buffers file
  std::string trace_dir;      // where functions-PID.tsv go
  std::string tracer = "function_graph";
  // Globs (symbols/glob.hpp). -F, -N: uftrace's filters, every function traced and
  // these open scopes (ftrace::Scope); --only, --skip: only these functions are traced,
  // these are not (not even patched).
  std::vector<std::string> filters;   // -F: record inside calls of these only
  std::vector<std::string> notrace;   // -N: record nothing inside calls of these
  std::vector<std::string> only;      // --only
  std::vector<std::string> skip;      // --skip
  bool libraries = false;             // trace shared libraries' functions too
  bool libcalls = true;               // trace the program's calls into libraries (GOT)
  bool nest_libcalls = false;         // and the libraries' calls into other libraries
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
  // Attaching to a running process: the CLI took SIGTRAP out of the masks of threads that
  // kept it blocked (os::unblock_signal; docs/attach.md, "SIGTRAP stays deliverable"). The
  // agent then takes over the program's signal functions for as long as a client is
  // attached, so that no thread blocks it again through them (they would inherit it).
  bool sigtrap_unblocked = false;
};

// The configuration in TEXT (the file's contents; SHOWN names it in errors). The agent
// reads the file only through load_trusted_config (agent/trust.hpp), which checks who
// made it first.
Result<Config> parse_config(const std::string& text, const std::string& shown);
std::string dump_config(const Config& c);  // JSON text

}  // namespace utramp::agent
