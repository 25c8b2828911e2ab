// The reference engine: one instruction at a time, RFC 9669 semantics spelled out in C++.
// The JIT must agree with it on every result, every memory effect and every fault.
#pragma once

#include <memory>

#include "ebpf/engine.hpp"

namespace utramp::ebpf {

class Interpreter final : public Executable {
 public:
  // `program` must have passed check_program() with the same helper table.
  static Result<std::unique_ptr<Interpreter>> create(Program program, const ExecOptions& options);

  EngineKind kind() const override { return EngineKind::interpreter; }
  uint64_t run(void* ctx, uint64_t len, RunStatus* status) const override;

 private:
  using Executable::Executable;
};

}  // namespace utramp::ebpf
