#include "ebpf/jit.hpp"

#include <fmt/format.h>

#include "arch/arch.hpp"
#include "arch/bpf_jit.hpp"

namespace utramp::ebpf {

Result<std::unique_ptr<JitProgram>> JitProgram::compile(Program program, const ExecOptions& options,
                                                     const Proof* proof) {
  RunEnv env = make_env(options, program.insns, proof != nullptr);
  std::unique_ptr<JitProgram> p(new JitProgram(std::move(program), std::move(env)));
  UTRAMP_TRY(p->build(proof));
  return p;
}

JitProgram::~JitProgram() {
  if (block_) os::ExecArena::instance().free(block_);
}

Result<void> JitProgram::build(const Proof* proof) {
  arch::BpfJitSpec spec;
  spec.proof = proof;
  spec.insns = program_.insns;
  spec.helpers = env_.callx.data();
  spec.helper_count = env_.callx.size();
  spec.ctx_size = env_.ctx_size;
  spec.no_ctx = env_.no_ctx;
  spec.ctx_writable = env_.ctx_writable;
  spec.loop_budget = env_.loop_budget;
  spec.publish_run = env_.publish_run;
  spec.env = reinterpret_cast<uint64_t>(&env_);
  spec.default_status = reinterpret_cast<uint64_t>(&default_status_);

  auto bound = arch::bpf_size_bound(spec);
  if (!bound) return std::move(bound).error();
  const arch::Window w = arch::rel32_window(reinterpret_cast<uint64_t>(&utramp_ebpf_load));
  auto block = os::ExecArena::instance().allocate(*bound, w.lo, w.hi);
  if (!block) return std::move(block).error();
  block_ = *block;  // freed by the destructor from here on
  auto code = arch::emit_bpf(spec, block_.addr);
  if (!code) return std::move(code).error();
  if (code->code.size() > block_.size)
    return make_error(Errc::too_big, fmt::format("JIT code of {} bytes exceeds its bound of {}",
                                                 code->code.size(), block_.size));
  UTRAMP_TRY(os::ExecArena::instance().write(block_, 0, code->code));
  code_size_ = code->code.size();
  full_ = reinterpret_cast<FullFn>(block_.addr + code->full_entry);
  native_ = reinterpret_cast<NativeFn>(block_.addr + code->native_entry);
  tail_entry_ = block_.addr + code->tail_entry;
  return {};
}

}  // namespace utramp::ebpf
