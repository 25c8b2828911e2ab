# The x86-64 instruction layer (src/arch/x86_64): byte goldens with disassembly beside them.
utramp_add_gtest(unit_arch_decode unit arch_decode_test.cpp)
utramp_add_gtest(unit_arch_relocate unit arch_relocate_test.cpp)
utramp_add_gtest(unit_arch_emit unit arch_emit_test.cpp)
# Listing goldens of the trampolines' generated code (golden/codegen; UTRAMP_UPDATE_GOLDENS=1
# rewrites them).
utramp_add_gtest(unit_arch_image_golden unit arch_image_golden_test.cpp)
target_include_directories(unit_arch_image_golden PRIVATE ${PROJECT_SOURCE_DIR}/tests/trace
                           ${PROJECT_SOURCE_DIR}/tests/e2e)
utramp_add_gtest(unit_arch_emit_error unit arch_emit_error_test.cpp)
target_link_libraries(unit_arch_emit_error PRIVATE asmjit::asmjit)
# Stubs and the tracer's images made from templates are asmjit's code for the same spec.
utramp_add_gtest(unit_arch_template unit arch_template_test.cpp)
target_link_libraries(unit_arch_template PRIVATE asmjit::asmjit)
# The extended state's save area: sized from the components saved (a CPUID model).
utramp_add_gtest(unit_arch_xstate unit arch_xstate_test.cpp)
# The user-stack unwinder (bpf_get_stack): this file's own call chains, built with and
# without frame pointers, and registers that point nowhere.
utramp_add_gtest(unit_arch_unwind unit arch_unwind_test.cpp arch_unwind_chain_fp.c arch_unwind_chain_nofp.c)
set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/arch_unwind_chain_fp.c PROPERTIES
  COMPILE_OPTIONS "-O2;-fno-omit-frame-pointer")
set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/arch_unwind_chain_nofp.c PROPERTIES
  COMPILE_OPTIONS "-O2;-fomit-frame-pointer")
