# Generated images seen by the unwinder and gdb (src/arch/jit_debug.hpp). The test
# emits its images with asmjit, and exports its own functions (-rdynamic) so that
# dladdr() names the frames around an image.
utramp_add_gtest(unit_jit_debug unit jit_debug_test.cpp)
target_link_libraries(unit_jit_debug PRIVATE asmjit::asmjit)
set_target_properties(unit_jit_debug PROPERTIES ENABLE_EXPORTS ON)

