// The environments a program's options make: the run environment both engines build
// (engine.hpp make_env) and the verifier's (verify_env). Apart from engine.cpp so that
// the interpreter and the verifier link without the JIT (the verifier's fuzzer).
#include <fmt/format.h>

#include "ebpf/engine.hpp"

namespace utramp::ebpf {

RunEnv make_env(const ExecOptions& o, std::span<const Insn> insns, bool trusted) {
  RunEnv env;
  env.regions = o.regions;
  env.ctx_writable = o.ctx_writable;
  env.ctx_size = o.ctx_size;
  // The verifier starts such a program with r1 = NULL, r2 = 0 (verifier.cpp, run()):
  // its code holds only the paths that follow from them, so the run must start there
  // too. A guard `if (r1 != 0)` is proven never taken and its target is ud2 in the JIT.
  env.no_ctx = !o.unverified && o.ctx_kind == CtxKind::memory && o.ctx_size == 0;
  env.loop_budget = o.loop_budget;
  env.strict_memory = o.strict_memory;
  if (o.helpers) {
    env.callx.assign(o.helpers->id_limit(), 0);
    for (const HelperInfo& h : o.helpers->all())
      env.callx[h.id] = reinterpret_cast<uint64_t>(trusted ? h.trusted_fn() : h.fn);
    // The engines run tail calls themselves: no function for a callx to reach.
    if (kTailCallHelper < env.callx.size()) env.callx[kTailCallHelper] = 0;
    // Trusted helpers check nothing against the run: nothing to publish.
    if (trusted) return env;
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

VerifyEnv verify_env(const ExecOptions& o) {
  VerifyEnv env;
  env.ctx.kind = o.ctx_kind;
  env.ctx.size = static_cast<uint32_t>(o.ctx_size);
  env.ctx.writable = o.ctx_writable;
  env.ctx.what = o.ctx_what.empty() ? fmt::format("the context ({} bytes{})", o.ctx_size,
                                                  o.ctx_writable ? ", writable" : "")
                                    : o.ctx_what;
  env.maps = o.maps;
  env.refs = o.refs;
  env.lines = o.lines;
  env.helpers = o.helpers;
  env.log_level = o.verifier_log;
  env.max_insns = o.verifier_max_insns;
  return env;
}

}  // namespace utramp::ebpf
