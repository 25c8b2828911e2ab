// Machine code for eBPF programs (the JIT's back end). The policy around it (checking,
// allocation, lifetime, the helper table) is src/ebpf/jit.cpp; this is only the bytes.
//
// The generated function has the semantics of the interpreter (src/ebpf/interpreter.cpp)
// exactly, including memory checks and faults (src/ebpf/memory.hpp); for a verified
// program, on every run the proof covers (all of them), without the checks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/result.hpp"
#include "ebpf/insn.hpp"
#include "ebpf/verifier.hpp"

namespace utramp::arch {

struct BpfJitSpec {
  std::span<const ebpf::Insn> insns;   // checked (ebpf::check_program)
  // Helper id -> address (0: none), for `call N` (resolved at emission) and `callx`
  // (looked up at run time in this table, which must outlive the code).
  const uint64_t* helpers = nullptr;
  uint64_t helper_count = 0;
  uint64_t ctx_size = 0;          // fixed context size; 0: length given per run
  bool no_ctx = false;            // every run gets r1 = NULL, r2 = 0 (ebpf::RunEnv::no_ctx)
  bool ctx_writable = false;
  uint64_t loop_budget = 0;       // 0: unlimited
  bool publish_run = false;       // keep ebpf::current_run() up to date
  uint64_t env = 0;               // const ebpf::RunEnv*, stored in each run's state
  uint64_t default_status = 0;    // ebpf::RunStatus* of runs through the native entry
  // The verifier's proof, or null (an unverified program: every check at run time).
  // With one the code is "proven": no run state, every access direct, no loop budget,
  // local calls without a depth check (see the file's comment).
  const ebpf::Proof* proof = nullptr;
};

struct BpfJitCode {
  std::vector<uint8_t> code;
  // uint64_t native(uint64_t* ctx): the trampoline-facing entry (length ctx_size,
  // faults to default_status).
  uint32_t native_entry = 0;
  // uint64_t full(void* ctx, uint64_t len, ebpf::RunStatus* status).
  uint32_t full_entry = 0;
  // Where a tail call jumps (ebpf::Executable::tail_entry): the full entry's arguments
  // (status 0: default_status) and rax = the invocation's tail calls so far, with the
  // caller's frame gone (the return address of the chain's first caller at rsp).
  uint32_t tail_entry = 0;
};

// The code as it must be placed at `base`.
Result<BpfJitCode> emit_bpf(const BpfJitSpec& spec, uint64_t base);
// An upper bound of emit_bpf()'s size at any base, to allocate before emitting.
Result<size_t> bpf_size_bound(const BpfJitSpec& spec);

}  // namespace utramp::arch
