# The runtime's boundary, checked on what the build made:
# - libutramp.so exports the C API only, and the agent only the libc functions it
#   interposes (src/utramp.map, src/agent/agent.map);
# - no object of the runtime needs a constructor for a namespace-scope variable
#   (src/common/init.hpp says why);
# - the agent's thread-local storage fits in what dlopen can give it in a running
#   process (docs/attach.md): at most 256 bytes;
# - every #include of src/ points down the layers of docs/architecture.md;
# - the CLI and the agent do not load the metrics server's HTTP and TLS libraries, and
#   the CLI does not make the runtime's managers at load (the agent does).
add_test(NAME unit_boundary.exports
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/boundary_test.sh exports
          $<TARGET_FILE:utramp> $<TARGET_FILE:utramp_agent> ${PROJECT_SOURCE_DIR}/src/agent/agent.map)
add_test(NAME unit_boundary.no_global_constructors
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/boundary_test.sh ctors $<TARGET_OBJECTS:utramp_objs>
  COMMAND_EXPAND_LISTS)
add_test(NAME unit_boundary.agent_tls
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/boundary_test.sh tls $<TARGET_FILE:utramp_agent> 256)
add_test(NAME unit_boundary.layers
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/boundary_test.sh layers
          ${PROJECT_SOURCE_DIR}/docs/architecture.md ${PROJECT_SOURCE_DIR}/src)
add_test(NAME unit_boundary.lean_start
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/boundary_test.sh lean $<TARGET_FILE:utramp_cli>
          $<TARGET_FILE:utramp_agent>)
set_tests_properties(unit_boundary.exports unit_boundary.no_global_constructors
  unit_boundary.agent_tls unit_boundary.layers unit_boundary.lean_start PROPERTIES LABELS unit)
