// Running a checked program: the interpreter (the reference) or the x86-64 JIT, behind
// one interface, with the same semantics down to the fault each bad run reports.
//
// A run starts with r1 = ctx, r2 = the context's length (ctx_size when the program has
// a fixed one; r1 = NULL, r2 = 0 for a program verified with no context, ctx_size 0 and
// CtxKind::memory, as the verifier assumed), r10 = the top of a fresh 512-byte frame,
// every other register 0; it ends at the main function's exit with r0. Memory rules:
// memory.hpp. Local calls save r6-r9 and r10 and give the callee the next 512-byte
// frame, kMaxFrames in all.
//
// The native entry (JIT only) is what a trampoline calls: uint64_t fn(uint64_t* ctx),
// context length ctx_size, faults counted in the program's own status.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/result.hpp"
#include "ebpf/helpers.hpp"
#include "ebpf/insn.hpp"
#include "ebpf/memory.hpp"
#include "ebpf/verifier.hpp"

namespace utramp::ebpf {

enum class EngineKind : uint8_t { interpreter, jit };
const char* engine_name(EngineKind k);

inline constexpr uint64_t kDefaultLoopBudget = uint64_t(1) << 24;

struct ExecOptions {
  const HelperTable* helpers = nullptr;
  std::vector<Region> regions;     // static regions (maps, global data)
  uint64_t ctx_size = 0;           // 0: the context length is given per run (verified: no context)
  bool ctx_writable = false;
  // Backward jumps a run may take (0: unlimited): the bound of an unverified program,
  // whose loop that never ends would hang the traced thread. A verified program's JIT
  // code has none (the proof says every path ends); the interpreter keeps it always.
  uint64_t loop_budget = kDefaultLoopBudget;

  // What the verifier is told besides ctx_size and ctx_writable (verifier.hpp): what
  // the context is, the maps and the lddws that name them, line info for messages.
  CtxKind ctx_kind = CtxKind::memory;
  std::string ctx_what;
  std::vector<MapSpec> maps;
  std::vector<MapRef> refs;
  std::vector<LineInfo> lines;
  int verifier_log = 0;           // VerifyEnv::log_level: a refusal carries the log (verify() gives it always)
  uint64_t verifier_max_insns = VerifyEnv{}.max_insns;

  // Tests only (`--unverified`): run the program without a proof, every runtime check
  // on. The conformance suite's programs that are unsafe on purpose run this way.
  bool unverified = false;
  // Interpreter only, the verifier's oracle: a load outside the program's memory (stack,
  // context, regions) is a fault (FaultKind::wild_load) instead of a fault-safe copy,
  // and a load or store on the stack that leaves one frame of the live chain (the
  // current frame or a caller's) faults too. The verifier's fuzzer and case suite run
  // accepted programs so: none may ever fault.
  bool strict_memory = false;
};

// The verifier's view of `options` (the context, maps, references, helpers).
VerifyEnv verify_env(const ExecOptions& options);

using NativeFn = uint64_t (*)(uint64_t* ctx);

class Executable {
 public:
  virtual ~Executable() = default;
  virtual EngineKind kind() const = 0;
  // One run. A fault returns 0 and is recorded in `status` (never null).
  virtual uint64_t run(void* ctx, uint64_t len, RunStatus* status) const = 0;
  // The C-callable entry for trampolines, or null (the interpreter has none).
  virtual NativeFn native() const { return nullptr; }
  // Faults of runs through native(): counted here.
  RunStatus& default_status() const { return default_status_; }

  // run() with a fault turned into an error naming the instruction.
  Result<uint64_t> execute(void* ctx, uint64_t len) const;

  const Program& program() const { return program_; }
  const RunEnv& env() const { return env_; }
  // Where a JIT'd tail call into this program jumps (0: not JIT code). The bytes there
  // expect rdi = the context, rsi = its length, rdx = a RunStatus* or 0 (the target's
  // own), rax = the tail calls made so far in the invocation (src/arch/bpf_jit.hpp).
  uint64_t tail_entry() const { return tail_entry_; }

 protected:
  Executable(Program p, RunEnv env) : program_(std::move(p)), env_(std::move(env)) {}
  Program program_;
  RunEnv env_;
  mutable RunStatus default_status_;
  uint64_t tail_entry_ = 0;
};

// A tail call (helper 12) of JIT code: the tail entry of program `index` of prog_array
// `map`, or 0 to fall through (maps.hpp tail_call_target, which counts in *count; a
// target that is not JIT code falls through too).
extern "C" uint64_t utramp_ebpf_tail_entry(uint64_t map, uint64_t index, uint64_t* count) noexcept;

// Checks the program (check.hpp), proves it safe (verifier.hpp; unless
// options.unverified) and prepares it for `kind`. A refusal names the program and
// carries the verifier's evidence.
Result<std::unique_ptr<Executable>> load(Program program, const ExecOptions& options, EngineKind kind);

// The environment both engines build from the options, for the (checked) program.
// `trusted`: the helpers are the trusted forms (a verified program's JIT code).
RunEnv make_env(const ExecOptions& options, std::span<const Insn> insns, bool trusted = false);

}  // namespace utramp::ebpf
