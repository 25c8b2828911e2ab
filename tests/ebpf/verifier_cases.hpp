// The verifier's data-driven cases (tests/ebpf/verifier/*.cases) and running an
// accepted program with every run-time check on. Shared by verifier_cases_test.cpp,
// the fuzz target (verifier_fuzz.cpp) and bench/ebpf_verifier.cpp.
//
// A .cases file is a table of cases, each from `== NAME` to the next:
//
//   # a comment
//   == NAME                    the case (its name is unique in the suite)
//   ctx KIND SIZE [writable]   what r1 points to: tracing, pt_regs or memory, SIZE bytes
//                              (default: tracing 16, two argument words)
//   map NAME TYPE KEY VALUE MAX [readonly]   a map (TYPE: hash array percpu_hash
//                              percpu_array lru_hash ringbuf), in the order of the object
//   limit N                    the complexity limit (instructions processed; default 1M)
//   each VAR V1 V2 ...         the case once per value, $VAR replaced in every line (two
//                              `each` lines: every combination); the name gets the values
//   accept                     the verifier must accept it
//   refuse INSN WORDS...       it must be refused at instruction INSN ("insn INSN" leads
//                              the message) with WORDS in the message; INSN `any` for
//                              the complexity limit, which stops wherever the count ends
//   anything else              the program, in the assembler's syntax (ebpf/asm.hpp);
//                              `lddw %rN, map:NAME` loads map NAME, `lddw %rN,
//                              map_value:NAME+OFF` the address of its value + OFF
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "ebpf/engine.hpp"
#include "ebpf/maps.hpp"
#include "ebpf/verifier.hpp"

namespace utramp::ebpf::testing {

struct VerifierCase {
  std::string name;
  std::string file;  // where it is, for messages: "stack.cases:12"
  ContextSpec ctx;
  std::vector<MapSpec> maps;
  std::string text;  // the program (map references still symbolic)
  bool accept = true;
  uint32_t insn = 0;  // refuse: the instruction
  bool any_insn = false;
  std::string words;  // refuse: words of the message
  uint64_t max_insns = VerifyEnv{}.max_insns;
};

// Every case of a .cases file, variants expanded.
Result<std::vector<VerifierCase>> parse_cases(const std::filesystem::path& file);
// Every case of every .cases file of `dir`, sorted by file then order.
Result<std::vector<VerifierCase>> all_cases(const std::filesystem::path& dir);

// The program: assembled, with the map references (MapRef) its lddws make.
struct Assembled {
  std::vector<Insn> insns;
  std::vector<MapRef> refs;
};
Result<Assembled> assemble_case(const VerifierCase& c);

// Options to load a case's program: its context, maps and references, runtime helpers.
ExecOptions case_options(const VerifierCase& c, const Assembled& a);

// Maps in a private file (created, attached and unlinked at once: nothing is left in
// the file system) and a context, to run a program in.
class Sandbox {
 public:
  static Result<std::unique_ptr<Sandbox>> create(const std::vector<MapSpec>& maps, const ContextSpec& ctx);
  // `insns` with the map references resolved to this sandbox's maps, and the options
  // with its regions.
  std::vector<Insn> resolve(std::vector<Insn> insns, const std::vector<MapRef>& refs) const;
  void add_regions(ExecOptions& o) const;
  void* ctx() { return ctx_.data() + 3; }  // after the header words (cookie, ip, count)
  MapHeader* map(size_t i) const { return maps_.header(i); }
  uint64_t dropped(size_t i) const { return maps_.ring_dropped(i); }
  uint64_t ctx_len() const { return size_; }

 private:
  MapFile maps_;
  std::vector<MapSpec> specs_;
  std::vector<uint64_t> ctx_;
  uint64_t size_ = 0;
};

// A run of an accepted program on one engine (`proven`: the JIT given the proof; else
// the interpreter with strict memory (ExecOptions::strict_memory: every access inside
// one live stack frame, the context or one map value), the loop budget and every check on).
struct RunResult {
  bool faulted = false;
  std::string fault;
  uint64_t r0 = 0;
};
// `loader` makes the engine (the fuzzer's links only the interpreter).
using Loader = Result<std::unique_ptr<Executable>> (*)(Program, const ExecOptions&, EngineKind);
Result<RunResult> run_in_sandbox(const std::vector<Insn>& insns, const std::vector<MapRef>& refs, ExecOptions o,
                                 const std::vector<MapSpec>& maps, const ContextSpec& ctx, EngineKind engine,
                                 Loader loader = &load);

}  // namespace utramp::ebpf::testing
