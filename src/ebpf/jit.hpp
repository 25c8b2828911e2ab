// The JIT: a checked program compiled to machine code (src/arch/bpf_jit.hpp) in the
// executable arena, callable as a plain C function.
//
// Size, emit, protect, publish: the code is sized with every call in its long form,
// a block is taken in the arena within rel32 reach of libutramp (so the slow paths and
// most helpers are direct calls), the code is emitted for that address and written
// into it (os::ExecArena::write: memory never writable and executable at once, sealed
// read+exec when the write returns). Only then are the entries handed out.
//
// Lifetime: the code and the run environment (callx table, static regions) live as long
// as the JitProgram. The owner must make sure no thread runs the program when it
// destroys it (a trampoline detaches first and waits out its image: DESIGN §5).
#pragma once

#include <memory>
#include <span>

#include "ebpf/engine.hpp"
#include "os/exec_memory.hpp"

namespace utramp::ebpf {

class JitProgram final : public Executable {
 public:
  // `program` must have passed check_program() with the same helper table. With a
  // proof (the verifier's, for this program and these options) the code leaves out
  // every check the proof makes redundant: memory bounds, the loop budget, call depth,
  // divisors proven non-zero; it calls the helpers' trusted forms.
  static Result<std::unique_ptr<JitProgram>> compile(Program program, const ExecOptions& options,
                                                     const Proof* proof = nullptr);
  ~JitProgram() override;

  EngineKind kind() const override { return EngineKind::jit; }
  uint64_t run(void* ctx, uint64_t len, RunStatus* status) const override {
    return full_(ctx, len, status);
  }
  NativeFn native() const override { return native_; }

  // The generated code, for disassembly in diagnostics and tests.
  std::span<const uint8_t> code() const {
    return {reinterpret_cast<const uint8_t*>(block_.addr), code_size_};
  }
  uint64_t address() const { return block_.addr; }

 private:
  using FullFn = uint64_t (*)(void* ctx, uint64_t len, RunStatus* status);
  using Executable::Executable;
  Result<void> build(const Proof* proof);

  os::ExecBlock block_{};
  size_t code_size_ = 0;
  FullFn full_ = nullptr;
  NativeFn native_ = nullptr;
};

}  // namespace utramp::ebpf
