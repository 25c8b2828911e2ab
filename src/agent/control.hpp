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
//
// Clients. Each connection is a client with an id of its own (from 1, never reused in
// the process; 0 is the launcher's, agent/bpf.hpp's kLaunchClient). The client whose
// apply_config was taken owns what that made: its `release`, or the end of its
// connection however it ends (a SIGKILL included: the kernel closes the socket),
// removes that and nothing of another client's, in the same wake-up. `detach` removes
// every client's.
struct ControlHandlers {
  std::recursive_mutex* lock = nullptr;       // the agent's lock
  nlohmann::json (*show)() = nullptr;         // what the agent has put in, as show_json
  Result<nlohmann::json> (*detach)() = nullptr;  // remove all of it, every client's
  // apply_config of CLIENT, its configuration trusted already (agent/trust.hpp): start
  // tracing, or its eBPF programs. Null: this agent takes none.
  Result<nlohmann::json> (*configure)(TrustedConfig, uint64_t client) = nullptr;
  // What CLIENT's configuration made, removed (its release, or its end).
  Result<nlohmann::json> (*release)(uint64_t client) = nullptr;
  void (*log)(const char* text) = nullptr;    // a line in the agent's log
};

// Starts the thread (once per process). Errors (the name is taken: another process
// squats @utramp/PID) are returned for the log; the program runs on either way.
Result<void> start_control(const ControlHandlers& h);
// In a child after fork: the parent's thread and connections are not the child's (its
// socket is closed there; the child has no control channel).
void control_after_fork_child();
// The connected clients, for show, the caller's included: [{"id":, "pid":, "uid":,
// "command": the peer's command line, "since": when it connected (UTC, ISO 8601),
// "configured": whether its apply_config was taken}].
nlohmann::json control_clients();

}  // namespace utramp::agent
