// The control channel between the CLI and the agent in a running process
// (docs/attach.md, "The control channel"): its one definition, used by both sides.
//
// Where. Each agent listens on a Unix-domain stream socket in the abstract namespace,
// "@utramp/PID" (socket_name): nothing in the file system to leave behind, and it goes
// away with the process. An abstract name can be bound by anyone, so each side checks
// the other with SO_PEERCRED before anything is read:
//   - the agent accepts a peer whose uid is the process's effective uid, or root, or
//     one holding CAP_SYS_PTRACE (peer_allowed); anyone else is closed at once, before
//     a byte is read, and nothing changes;
//   - the CLI talks only to a listener that is process PID itself with the uid the
//     process runs as (server_is): a socket squatted by another process is refused with
//     its pid and uid named.
//
// Messages. A message is a 12-byte header, then a JSON object:
//   bytes 0..3    magic "UTCC"
//   bytes 4..5    version (kVersion), little-endian
//   bytes 6..7    type (MsgType), little-endian
//   bytes 8..11   length of the JSON text, little-endian, at most kMaxPayload
// A request gets exactly one answer: MsgType::reply with the request's result, or
// MsgType::error with {"error": TEXT}. Anything malformed (bad magic, another version,
// an unknown type, a length over the bound, text that is not a JSON object) ends that
// connection only: the agent answers with an error when it can and closes it.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/result.hpp"

namespace utramp::agent::control {

inline constexpr char kMagic[4] = {'U', 'T', 'C', 'C'};
inline constexpr uint16_t kVersion = 2;  // 2: release, and clients side by side (apply_config per connection)
inline constexpr size_t kHeaderSize = 12;
inline constexpr uint32_t kMaxPayload = 1u << 20;  // 1 MiB: a configuration fits many times

enum class MsgType : uint16_t {
  show = 1,          // {} -> what the agent has put in (agent/control.cpp: show_json)
  detach = 2,        // {} -> everything removed, every client's; {"restored": N, ...}
  apply_config = 3,  // {"config": the agent's configuration (agent/config.hpp, dump_config's JSON)}
  // {} -> what this connection's apply_config made removed, nothing of another
  // client's (the end of `record -p`, `run -p`); answered as detach is
  release = 4,
  reply = 0x100,     // the answer to a request
  error = 0x101,     // {"error": TEXT}
};
std::string_view type_name(MsgType t) noexcept;  // "show", ..., "?" for another value

struct Message {
  MsgType type = MsgType::reply;
  nlohmann::json body = nlohmann::json::object();
};

// The header and JSON text of M.
std::string encode(const Message& m);

// Reads messages out of a byte stream, one at a time. A malformed message is an error
// (Errc::bad_format) that says what was wrong and where; the decoder is then dead (the
// connection is to be closed): every later next() repeats the error.
class Decoder {
 public:
  void feed(std::string_view bytes);
  // The next whole message, or nullopt while more bytes are needed.
  Result<std::optional<Message>> next();
  size_t buffered() const { return buf_.size(); }

 private:
  std::string buf_;
  std::optional<Error> dead_;
};

// "utramp/PID": the abstract socket name (shown "@utramp/PID"); ADDR and LEN filled in.
std::string socket_name(pid_t pid);
void socket_address(pid_t pid, sockaddr_un* addr, socklen_t* len);

// The credentials the kernel gives for the other end of a connected socket.
struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};
Result<Peer> peer_of(int fd);
// Whether process PID holds CAP_SYS_PTRACE in its effective set (/proc/PID/status).
bool has_cap_sys_ptrace(pid_t pid);
// The agent's rule: nothing when PEER may control a process running as PROCESS_UID,
// else the reason (for the agent's log).
Result<void> peer_allowed(const Peer& peer, uid_t process_uid, bool peer_has_cap_sys_ptrace);
// The CLI's rule: nothing when the listener PEER is process PID running as UID.
Result<void> server_is(const Peer& peer, pid_t pid, uid_t uid);

// The CLI's side: connect to process PID's agent (checked with server_is against the
// uid /proc/PID/status gives), send REQUEST, wait up to TIMEOUT_MS for the answer. An
// error answer becomes an Error with its text.
Result<nlohmann::json> call(pid_t pid, const Message& request, int timeout_ms);
// The pieces of call(), for a client that keeps its connection open.
Result<int> connect_to(pid_t pid);
Result<void> send_message(int fd, const Message& m);
Result<Message> receive_message(int fd, Decoder* d, int timeout_ms);

}  // namespace utramp::agent::control
