#include "ebpf/engine.hpp"

#include <fmt/format.h>

#include <optional>

#include "ebpf/check.hpp"
#include "ebpf/interpreter.hpp"
#include "ebpf/jit.hpp"
#include "ebpf/maps.hpp"

namespace utramp::ebpf {

const char* engine_name(EngineKind k) { return k == EngineKind::jit ? "jit" : "interpreter"; }

Result<uint64_t> Executable::execute(void* ctx, uint64_t len) const {
  RunStatus st;
  const uint64_t r0 = run(ctx, len, &st);
  if (st.faults.load() == 0) return r0;
  return make_error(Errc::invalid_argument,
                    fmt::format("{}: {}", program_.name.empty() ? "program" : program_.name,
                                describe_fault(program_.insns, st.kind(), st.insn(), st.addr())));
}

extern "C" uint64_t utramp_ebpf_tail_entry(uint64_t map, uint64_t index, uint64_t* count) noexcept {
  const Executable* t = tail_call_target(map, index, count);
  return t ? t->tail_entry() : 0;
}

Result<std::unique_ptr<Executable>> load(Program program, const ExecOptions& options, EngineKind kind) {
  UTRAMP_TRY(check_program(program.insns, options.helpers));
  // The proof lives as long as the load: the JIT reads it while it emits, nothing after.
  std::optional<Verified> verified;
  if (!options.unverified) {
    auto v = verify(program.insns, verify_env(options));
    if (!v)
      return make_error(v.error().code, fmt::format("{} refused by the verifier:\n{}",
                                                    program.name.empty() ? "program" : "program '" + program.name + "'",
                                                    v.error().message));
    verified = std::move(*v);
  }
  std::unique_ptr<Executable> out;
  if (kind == EngineKind::interpreter) {
    auto r = Interpreter::create(std::move(program), options);
    if (!r) return std::move(r).error();
    out = std::move(*r);
  } else {
    auto r = JitProgram::compile(std::move(program), options, verified ? &verified->proof : nullptr);
    if (!r) return std::move(r).error();
    out = std::move(*r);
  }
  return out;
}

}  // namespace utramp::ebpf
