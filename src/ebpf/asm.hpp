// An assembler for the text syntax of the eBPF conformance cases (bpf_conformance's
// `-- asm` sections), also what the disassembler (insn.hpp) prints:
//
//   mov32 %r0, 0            add %r1, %r2          neg32 %r3        sdiv %r0, -3
//   movsx1664 %r1, %r2      be16 %r0   le32 %r0   bswap64 %r0      swap16 %r0
//   lddw %r0, 0x1122334455667788
//   ldxb %r0, [%r1+0x2]     ldxsw %r0, [%r10-8]   stw [%r1], 5     stxdw [%r10-8], %r1
//   lock add [%r10-8], %r1  lock fetch xor32 [%r1+4], %r2
//   lock xchg [%r1], %r2    lock cmpxchg [%r10-8], %r1
//   jeq %r1, 3, +2          jslt32 %r1, %r2, LABEL      ja -1      ja32 LABEL
//   call 5                  call local NAME             call %r2 (callx)      exit
//   LABEL:                  # comment
//
// A jump names a label or gives "+N"/"-N" slots from the next instruction. `exit` as a
// jump target means the first exit instruction unless a label of that name exists.
// Immediates are decimal (signed, in range of the field) or hexadecimal (the field's
// bit pattern: 0xffffffff is a valid imm32).
//
// Errors are values: Errc::bad_format, "line N: REASON", with the reasons worded as the
// conformance suite's own assembler words them ("Invalid register: %r50", "Invalid
// number of operands for lock", "Invalid mnemonic: ldxq", "Invalid label: X").
#pragma once

#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "ebpf/insn.hpp"

namespace utramp::ebpf {

// `first_line` numbers the text's first line in messages (a data file's asm section
// starts some lines in).
Result<std::vector<Insn>> assemble(std::string_view text, int first_line = 1);

}  // namespace utramp::ebpf
