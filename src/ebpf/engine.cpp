#include "ebpf/engine.hpp"

#include <fmt/format.h>

#include "ebpf/check.hpp"
#include "ebpf/interpreter.hpp"
#include "ebpf/jit.hpp"

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

RunEnv make_env(const ExecOptions& o, std::span<const Insn> insns) {
  RunEnv env;
  env.regions = o.regions;
  env.ctx_writable = o.ctx_writable;
  env.ctx_size = o.ctx_size;
  env.loop_budget = o.loop_budget;
  if (o.helpers) {
    env.callx.assign(o.helpers->id_limit(), 0);
    for (const HelperInfo& h : o.helpers->all()) env.callx[h.id] = reinterpret_cast<uint64_t>(h.fn);
    bool any_needs_run = false;
    for (const HelperInfo& h : o.helpers->all()) any_needs_run |= h.needs_run;
    for (const Insn& i : insns) {
      if (i.code == op::kCallxOp) env.publish_run |= any_needs_run;
      if (i.code != op::kCallOp || i.src != op::kCallHelper) continue;
      const HelperInfo* h = o.helpers->find(static_cast<uint32_t>(i.imm));
      env.publish_run |= h && h->needs_run;
    }
  }
  return env;
}

Result<std::unique_ptr<Executable>> load(Program program, const ExecOptions& options, EngineKind kind) {
  UTRAMP_TRY(check_program(program.insns, options.helpers));
  if (kind == EngineKind::interpreter) {
    auto r = Interpreter::create(std::move(program), options);
    if (!r) return std::move(r).error();
    return std::unique_ptr<Executable>(std::move(*r));
  }
  auto r = JitProgram::compile(std::move(program), options);
  if (!r) return std::move(r).error();
  return std::unique_ptr<Executable>(std::move(*r));
}

}  // namespace utramp::ebpf
