// libFuzzer target over the verifier, differential: bytes make a program
// (verifier_gen.hpp); it is checked and verified, and when the verifier accepts it, it
// runs on the interpreter with every run-time check on (strict memory, store checks,
// the loop budget) against real maps and a context of the size it was verified for.
// An accepted program that trips any check, or a verifier that crashes, hangs or
// leaks, stops the fuzzer with the input (the program's listing on stderr).
//   scripts/fuzz.sh [SECONDS]    builds it and runs it (CI: a minute, as the loader's)
// The proven JIT code runs the same programs in unit_ebpf_verifier
// (VerifierGenerated.AcceptedProgramsNeverFault), which the fuzz build leaves out.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "ebpf/check.hpp"
#include "ebpf/interpreter.hpp"
#include "verifier_cases.hpp"
#include "verifier_gen.hpp"

namespace {

using namespace utramp;
using namespace utramp::ebpf;
using namespace utramp::ebpf::testing;

Result<std::unique_ptr<Executable>> interpreter(Program p, const ExecOptions& o, EngineKind) {
  auto r = Interpreter::create(std::move(p), o);
  if (!r) return std::move(r).error();
  return std::unique_ptr<Executable>(std::move(*r));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const VerifierCase c = generate_case(data, size);
  auto a = assemble_case(c);
  if (!a) {  // the generator makes only what the assembler takes
    std::fprintf(stderr, "generated text does not assemble: %s\n%s", a.error().message.c_str(), c.text.c_str());
    std::abort();
  }
  ExecOptions o = case_options(c, *a);
  if (!check_program(a->insns, o.helpers)) return 0;
  if (!verify(a->insns, verify_env(o))) return 0;
  auto r = run_in_sandbox(a->insns, a->refs, o, c.maps, c.ctx, EngineKind::interpreter, &interpreter);
  if (!r || r->faulted) {
    std::fprintf(stderr, "an accepted program %s: %s\n%s", r ? "tripped a run-time check" : "did not run",
                 r ? r->fault.c_str() : r.error().message.c_str(), disassemble(a->insns).c_str());
    std::abort();
  }
  return 0;
}
