// The structural checks every program passes before an engine takes it: what the
// kernel's verifier checks before it looks at values (check_subprogs, the reserved
// fields of each opcode), nothing about values. What they guarantee to the engines:
//
//   - every opcode is one of RFC 9669's (legacy packet access and kfunc calls refused);
//   - reserved fields are zero (src of a K-form, imm of an X-form, off where unused...);
//   - registers are r0..r10, and r10 is never written;
//   - each lddw has its second slot, and the loader has resolved it (src 0);
//   - every jump and local call lands on an instruction (not a second lddw slot);
//   - no path falls off the end (the last instruction is exit or an unconditional ja);
//   - every `call N` names a helper of the table.
//
// Memory safety and termination are not proven here; the engines check those at run
// time (memory.hpp).
#pragma once

#include "common/result.hpp"
#include "ebpf/helpers.hpp"
#include "ebpf/insn.hpp"

namespace utramp::ebpf {

inline constexpr size_t kMaxInsns = 1u << 20;

// Errors name the instruction index, its disassembly and bytes, and the rule broken.
Result<void> check_program(std::span<const Insn> insns, const HelperTable* helpers);

}  // namespace utramp::ebpf
