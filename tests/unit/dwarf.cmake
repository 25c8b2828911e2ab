# Signatures from DWARF (src/os/dwarf.cpp). The fixture libraries are one compiler run
# each of dwarf_fixture.c / dwarf_fixture.cpp, invoking gcc, clang, g++ and clang++
# directly (the matrix is about what those compilers emit, not the one CMake chose):
#
#   dwfx_<lang>_<cc>_<opt>.so            lang c|cxx, cc gcc|clang, opt O0|O2, DWARF 5
#   dwfx_<lang>_<cc>_O2_dwarf4.so        -gdwarf-4 (DW_AT_bit_offset-era bitfields)
#   dwfx_<lang>_<cc>_O2_types.so         -fdebug-types-section (types in type units)
#   dwfx_<lang>_<cc>_O2_split.so         -gsplit-dwarf (skeleton units, .dwo beside it)
#   dwfx_c_gcc_O2_stripped.so            strip --strip-debug: no DWARF, build-id only
#   dwfx_c_gcc_O2_linked.so + .debug     DWARF moved to a .gnu_debuglink file
#   dwfx_c_gcc_g1.so                     -g1: functions without types
#   dwfx_asm_gcc.so                      dwarf_fixture_asm.S: gas's DWARF, no types
#   dwfx_xtu_<cc>.so                     dwarf_fixture_xtu*.cpp: a class whose definition
#                                        is in another unit than its by-value use
#
# A compiler that is missing leaves its fixtures unbuilt; the test skips them and says so.
set(DWFX_DIR ${CMAKE_CURRENT_BINARY_DIR}/dwarf_fixtures)
file(MAKE_DIRECTORY ${DWFX_DIR})
set(DWFX_C ${CMAKE_CURRENT_SOURCE_DIR}/dwarf_fixture.c)
set(DWFX_CXX ${CMAKE_CURRENT_SOURCE_DIR}/dwarf_fixture.cpp)

find_program(UTRAMP_DW_GCC NAMES gcc)
find_program(UTRAMP_DW_CLANG NAMES clang)
find_program(UTRAMP_DW_GXX NAMES g++)
find_program(UTRAMP_DW_CLANGXX NAMES clang++)
find_program(UTRAMP_DW_STRIP NAMES strip)
find_program(UTRAMP_DW_OBJCOPY NAMES objcopy)

set(dwfx_outputs "")

# dwfx_lib(NAME COMPILER SOURCE FLAGS...): one shared library in DWFX_DIR.
function(dwfx_lib name compiler src)
  if(NOT compiler)
    return()
  endif()
  add_custom_command(
    OUTPUT ${DWFX_DIR}/${name}
    COMMAND ${compiler} ${ARGN} -shared -fPIC -Wl,--build-id -o ${DWFX_DIR}/${name} ${src}
    DEPENDS ${src} ${CMAKE_CURRENT_SOURCE_DIR}/dwarf_fixture_xtu.hpp
    WORKING_DIRECTORY ${DWFX_DIR}
    COMMENT "dwarf fixture ${name}"
    VERBATIM)
  set(dwfx_outputs ${dwfx_outputs} ${DWFX_DIR}/${name} PARENT_SCOPE)
endfunction()

# dwfx_split(NAME COMPILER SOURCE FLAGS...): the same with -gsplit-dwarf, compiled to an
# object first so the .dwo is named after it (NAME.dwo) rather than after the source.
function(dwfx_split name compiler src)
  if(NOT compiler)
    return()
  endif()
  add_custom_command(
    OUTPUT ${DWFX_DIR}/${name}.so ${DWFX_DIR}/${name}.dwo
    COMMAND ${compiler} ${ARGN} -gsplit-dwarf -fPIC -c -o ${name}.o ${src}
    COMMAND ${compiler} -shared -Wl,--build-id -o ${name}.so ${name}.o
    DEPENDS ${src}
    WORKING_DIRECTORY ${DWFX_DIR}
    COMMENT "dwarf fixture ${name}.so"
    VERBATIM)
  set(dwfx_outputs ${dwfx_outputs} ${DWFX_DIR}/${name}.so PARENT_SCOPE)
endfunction()

foreach(lang c cxx)
  if(lang STREQUAL "c")
    set(src ${DWFX_C})
    set(std -std=gnu17 -Wno-psabi)
    set(compilers gcc ${UTRAMP_DW_GCC} clang ${UTRAMP_DW_CLANG})
  else()
    set(src ${DWFX_CXX})
    set(std -std=c++17 -Wno-psabi)
    set(compilers gcc ${UTRAMP_DW_GXX} clang ${UTRAMP_DW_CLANGXX})
  endif()
  while(compilers)
    list(POP_FRONT compilers cc path)
    foreach(opt O0 O2)
      dwfx_lib(dwfx_${lang}_${cc}_${opt}.so "${path}" ${src} ${std} -g -${opt})
    endforeach()
    dwfx_lib(dwfx_${lang}_${cc}_O2_dwarf4.so "${path}" ${src} ${std} -gdwarf-4 -O2)
    dwfx_lib(dwfx_${lang}_${cc}_O2_types.so "${path}" ${src} ${std} -g -fdebug-types-section -O2)
    dwfx_split(dwfx_${lang}_${cc}_O2_split "${path}" ${src} ${std} -g -O2)
  endwhile()
endforeach()
dwfx_lib(dwfx_c_gcc_g1.so "${UTRAMP_DW_GCC}" ${DWFX_C} -std=gnu17 -Wno-psabi -g1 -O2)
set(DWFX_XTU ${CMAKE_CURRENT_SOURCE_DIR}/dwarf_fixture_xtu.cpp ${CMAKE_CURRENT_SOURCE_DIR}/dwarf_fixture_xtu_def.cpp)
dwfx_lib(dwfx_xtu_gcc.so "${UTRAMP_DW_GXX}" "${DWFX_XTU}" -g -O2)
dwfx_lib(dwfx_xtu_clang.so "${UTRAMP_DW_CLANGXX}" "${DWFX_XTU}" -g -O2)
dwfx_lib(dwfx_asm_gcc.so "${UTRAMP_DW_GCC}" ${CMAKE_CURRENT_SOURCE_DIR}/dwarf_fixture_asm.S -g)

if(UTRAMP_DW_GCC AND UTRAMP_DW_STRIP AND UTRAMP_DW_OBJCOPY)
  set(full ${DWFX_DIR}/dwfx_c_gcc_O2.so)
  add_custom_command(
    OUTPUT ${DWFX_DIR}/dwfx_c_gcc_O2_stripped.so
    COMMAND ${UTRAMP_DW_STRIP} --strip-debug -o ${DWFX_DIR}/dwfx_c_gcc_O2_stripped.so ${full}
    DEPENDS ${full} VERBATIM)
  add_custom_command(
    OUTPUT ${DWFX_DIR}/dwfx_c_gcc_O2_linked.so ${DWFX_DIR}/dwfx_c_gcc_O2_linked.debug
    COMMAND ${UTRAMP_DW_OBJCOPY} --only-keep-debug ${full} dwfx_c_gcc_O2_linked.debug
    COMMAND ${UTRAMP_DW_STRIP} --strip-debug -o dwfx_c_gcc_O2_linked.so ${full}
    COMMAND ${UTRAMP_DW_OBJCOPY} --add-gnu-debuglink=dwfx_c_gcc_O2_linked.debug dwfx_c_gcc_O2_linked.so
    DEPENDS ${full}
    WORKING_DIRECTORY ${DWFX_DIR}
    VERBATIM)
  list(APPEND dwfx_outputs ${DWFX_DIR}/dwfx_c_gcc_O2_stripped.so ${DWFX_DIR}/dwfx_c_gcc_O2_linked.so)
endif()

add_custom_target(unit_dwarf_fixtures DEPENDS ${dwfx_outputs})

utramp_add_gtest(unit_dwarf unit dwarf_test.cpp)
add_dependencies(unit_dwarf unit_dwarf_fixtures)
target_compile_definitions(unit_dwarf PRIVATE UTRAMP_DWARF_FIXTURE_DIR="${DWFX_DIR}")
