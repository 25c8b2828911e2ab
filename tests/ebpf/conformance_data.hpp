// The bpf_conformance data files (../shared/conformance, README there) and running one
// case on an engine. Shared by the tests and bench/ebpf_engines.cpp.
//
//   -- asm      the program in the assembler's syntax (src/ebpf/asm.hpp)
//   -- raw      the program as hex: one 64-bit instruction per token ("0x...18") or
//               eight bytes per line ("07 00 01 00 01 00 00 00")
//   -- mem      input memory, hex bytes: r1 points at it, r2 holds its length
//   -- result   the expected r0
//   -- error    the expected failure (may be empty: any failure)
//   -- c, -- no register offset: notes, ignored
// Lines starting with '#' outside the program are comments. Any other "-- " directive
// makes the file invalid.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "ebpf/engine.hpp"
#include "ebpf/insn.hpp"

namespace utramp::ebpf::testing {

struct DataCase {
  std::string name;                 // file name without .data
  std::filesystem::path path;
  std::optional<std::string> asm_text;
  int asm_line = 0;                 // line of the file where the asm text starts
  std::optional<std::vector<Insn>> raw;
  std::vector<uint8_t> mem;
  std::optional<uint64_t> result;
  std::optional<std::string> error;
};

Result<DataCase> parse_data_file(const std::filesystem::path& path);

// The case's program: raw if given (and then the asm, when also given, must assemble to
// the same instructions), else assembled.
Result<std::vector<Insn>> case_program(const DataCase& c);

// Where a case stopped.
enum class Stage { data, assemble, load, run, result, pass };
const char* stage_name(Stage s);

struct Outcome {
  Stage stage = Stage::pass;
  std::string message;          // why it failed (empty on pass)
  std::optional<uint64_t> r0;   // what the program returned, when it ran
  bool faulted = false;
  std::vector<uint8_t> mem;     // the memory after the run
};

// The helpers the conformance cases call: helper 5 returns its first argument (what
// bpf_conformance's ubpf plugin registers as "unwind" at index 5: call_unwind_fail and
// callx call it with r1 = -1 and expect the program to continue).
const HelperTable& conformance_helpers();

// Parses, assembles, loads and runs `path` on `engine`, comparing with the expectation.
// The program is verified first (r1 points to the case's memory, writable, r2 holds its
// length) unless `unverified`: the suite's cases that are unsafe on purpose run so
// (conformance_unverified.txt lists them, with the verifier's reason).
Outcome run_case(const std::filesystem::path& path, EngineKind engine, bool unverified = false);
Outcome run_case(const DataCase& c, EngineKind engine, bool unverified = false);

// *.data files of a directory, sorted.
std::vector<std::filesystem::path> data_files(const std::filesystem::path& dir);

// The directory of the cases (UTRAMP_CONFORMANCE_DIR at configure time), and whether
// it holds them.
std::filesystem::path conformance_dir();
bool conformance_present();

// The case names (file stems) of the suite's `sub` directory ("tests", "negative"),
// none when the suite is absent; and a gtest name for one (non-alphanumerics -> '_').
std::vector<std::string> case_names(const char* sub);
std::string param_test_name(const std::string& case_name);

}  // namespace utramp::ebpf::testing
