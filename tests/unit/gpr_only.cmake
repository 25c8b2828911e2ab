# The sources built for the general-purpose registers only (src/CMakeLists.txt,
# UTRAMP_GPR_ONLY: the probe hit path, the tracer's fast path, what probe handlers
# reach) use no x87, MMX, SSE, AVX or AVX-512 instruction (docs/probes.md, "Vector
# state"), checked on the objects of this build (either compiler) by
# gpr_only_test.sh. The hand-written thunks of graph_fast.cpp save the vector
# registers on purpose.
#
# And in a GCC build, where clang is installed, the same sources are built by clang with
# the flags a clang build gives them (a few seconds): clang builds of the project keep
# compiling (clang refuses libstdc++'s long double under -mgeneral-regs-only) and clang's
# code for them is checked too.
get_property(gpr_only_sources GLOBAL PROPERTY UTRAMP_GPR_ONLY_SOURCES)
string(REPLACE ";" "," gpr_only_sources "${gpr_only_sources}")
set(gpr_only_except "^utramp_graph_.*_thunk$")
add_test(NAME unit_gpr_only.objects
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpr_only_test.sh objects ${gpr_only_except}
          ${gpr_only_sources} $<TARGET_OBJECTS:utramp_objs>
  COMMAND_EXPAND_LISTS)
set_tests_properties(unit_gpr_only.objects PROPERTIES LABELS unit)
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  find_program(UTRAMP_CLANGXX NAMES clang++ clang++-16 clang++-15 clang++-14)
  if(UTRAMP_CLANGXX)
    add_test(NAME unit_gpr_only.clang
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpr_only_test.sh clang ${gpr_only_except}
              ${UTRAMP_CLANGXX} ${PROJECT_SOURCE_DIR}/src ${gpr_only_sources}
              -std=c++20 -O2 -fPIC -mno-sse -mno-mmx -fno-stack-protector -Wall -Wextra -Werror
              -Wno-missing-field-initializers
              "-I$<JOIN:$<FILTER:$<TARGET_PROPERTY:utramp_objs,INCLUDE_DIRECTORIES>,EXCLUDE,^/usr/include$>,;-I>"
              "-D$<JOIN:$<TARGET_PROPERTY:utramp_objs,COMPILE_DEFINITIONS>,;-D>"
      COMMAND_EXPAND_LISTS)
    set_tests_properties(unit_gpr_only.clang PROPERTIES LABELS unit)
  endif()
endif()
