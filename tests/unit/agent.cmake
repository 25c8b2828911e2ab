# What the agent trusts and how it writes (src/agent/trust.hpp, src/os/file.hpp); some
# cases act as a second user (nobody) and need root.
utramp_add_gtest(unit_agent_trust unit agent_trust_test.cpp)
target_include_directories(unit_agent_trust PRIVATE ${PROJECT_SOURCE_DIR}/tests/e2e)
# The control channel's protocol (src/agent/control_protocol.hpp): framing, bounds, the
# decoder on random and mutated input, the peer rules.
utramp_add_gtest(unit_control_protocol unit control_protocol_test.cpp)
