// The agent's end of the control channel (the protocol: agent/control_protocol.hpp;
// docs/attach.md, "The control channel"): one thread of utramp's own that listens on
// @utramp/PID, checks each peer, and answers `utramp show -p` and `utramp detach -p`.
#pragma once

#include <sys/types.h>

#include <mutex>

#include <nlohmann/json.hpp>

#include "agent/trust.hpp"
#include "common/result.hpp"

namespace utramp::agent {

// What the control thread asks of the agent (agent.cpp), each called with the agent's
// lock held and the thread marked as utramp at work.
struct ControlHandlers {
  std::recursive_mutex* lock = nullptr;       // the agent's lock
  nlohmann::json (*show)() = nullptr;         // what the agent has put in, as show_json
  Result<nlohmann::json> (*detach)() = nullptr;  // remove all of it
  // apply_config, its configuration trusted already (agent/trust.hpp): start tracing.
  // Null: this agent takes none (it was configured by its launcher). The client that
  // configured it owns what it started: when its connection ends, however (a SIGKILL
  // included: the kernel closes the socket), `detach` runs at once.
  Result<nlohmann::json> (*configure)(TrustedConfig) = nullptr;
  void (*log)(const char* text) = nullptr;    // a line in the agent's log
};

// Starts the thread (once per process). Errors (the name is taken: another process
// squats @utramp/PID) are returned for the log; the program runs on either way.
Result<void> start_control(const ControlHandlers& h);
// In a child after fork: the parent's thread and connections are not the child's (its
// socket is closed there; the child has no control channel).
void control_after_fork_child();
// The connected clients, for show: [{"pid":, "uid":}], the caller's included.
nlohmann::json control_clients();

}  // namespace utramp::agent
