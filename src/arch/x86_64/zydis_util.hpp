// Internal to src/arch/x86_64: shared Zydis objects.
#pragma once

#include <Zydis/Zydis.h>

#include <string>

namespace utramp::arch::x86 {

const ZydisDecoder& decoder();
std::string format(const ZydisDecodedInstruction& insn, const ZydisDecodedOperand* ops,
                   uint64_t address);

}  // namespace utramp::arch::x86
