# The x86-64 instruction layer (src/arch/x86_64): byte goldens with disassembly beside them.
utramp_add_gtest(unit_arch_decode unit arch_decode_test.cpp)
utramp_add_gtest(unit_arch_relocate unit arch_relocate_test.cpp)
utramp_add_gtest(unit_arch_emit unit arch_emit_test.cpp)
