#include "agent/control_protocol.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

namespace utramp::agent::control {

using nlohmann::json;

namespace {

void put16(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>(v >> 8));
}
void put32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get(const std::string& b, size_t at, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[at + static_cast<size_t>(i)]);
  return v;
}

bool known(uint16_t t) {
  switch (static_cast<MsgType>(t)) {
    case MsgType::show:
    case MsgType::detach:
    case MsgType::apply_config:
    case MsgType::release:
    case MsgType::reply:
    case MsgType::error:
      return true;
  }
  return false;
}

// A status line of /proc/PID/status ("Uid:", "CapEff:"): the text after the tab.
std::string status_field(pid_t pid, std::string_view key) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(key)) {
      const size_t at = line.find_first_not_of(" \t", key.size());
      return at == std::string::npos ? "" : line.substr(at);
    }
  return "";
}

// The effective uid process PID runs as (-1 when it cannot be read).
long uid_of(pid_t pid) {
  unsigned long ruid = 0, euid = 0;
  if (sscanf(status_field(pid, "Uid:").c_str(), "%lu %lu", &ruid, &euid) != 2) return -1;
  return static_cast<long>(euid);
}

}  // namespace

std::string_view type_name(MsgType t) noexcept {
  switch (t) {
    case MsgType::show: return "show";
    case MsgType::detach: return "detach";
    case MsgType::apply_config: return "apply_config";
    case MsgType::release: return "release";
    case MsgType::reply: return "reply";
    case MsgType::error: return "error";
  }
  return "?";
}

std::string encode(const Message& m) {
  // Never throws: text that is not UTF-8 (a path, a symbol) is sent with U+FFFD in its
  // place (the agent must not end the program over a name).
  const std::string text = m.body.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out(kMagic, sizeof kMagic);
  put16(&out, kVersion);
  put16(&out, static_cast<uint16_t>(m.type));
  put32(&out, static_cast<uint32_t>(text.size()));
  out += text;
  return out;
}

void Decoder::feed(std::string_view bytes) {
  if (!dead_) buf_.append(bytes);
}

Result<std::optional<Message>> Decoder::next() {
  if (dead_) return *dead_;
  const auto fail = [&](std::string why) -> Result<std::optional<Message>> {
    dead_ = make_error(Errc::bad_format, fmt::format("control message: {}", why));
    buf_.clear();
    return *dead_;
  };
  // The magic is checked as soon as its bytes are there: a peer that speaks something
  // else is told at once instead of waiting for a header's worth of bytes.
  for (size_t i = 0; i < std::min(buf_.size(), sizeof kMagic); ++i)
    if (buf_[i] != kMagic[i])
      return fail(fmt::format("bad magic: bytes {:02x} where \"UTCC\" was expected",
                              fmt::join(std::string_view(buf_).substr(0, std::min(buf_.size(), sizeof kMagic)), " ")));
  if (buf_.size() < kHeaderSize) return std::optional<Message>();
  const uint16_t version = static_cast<uint16_t>(get(buf_, 4, 2));
  const uint16_t type = static_cast<uint16_t>(get(buf_, 6, 2));
  const uint32_t length = get(buf_, 8, 4);
  if (version != kVersion)
    return fail(fmt::format("version {}, this side speaks version {}", version, kVersion));
  if (!known(type)) return fail(fmt::format("unknown type {:#x}", type));
  if (length > kMaxPayload)
    return fail(fmt::format("{} bytes of JSON announced, at most {} allowed", length, kMaxPayload));
  if (buf_.size() < kHeaderSize + length) return std::optional<Message>();
  Message m;
  m.type = static_cast<MsgType>(type);
  m.body = json::parse(buf_.begin() + kHeaderSize, buf_.begin() + kHeaderSize + length, nullptr,
                       /*allow_exceptions=*/false);
  if (m.body.is_discarded())
    return fail(fmt::format("the {} bytes after the header of a {} message are not JSON", length,
                            type_name(m.type)));
  if (!m.body.is_object())
    return fail(fmt::format("the body of a {} message is JSON {}, not an object", type_name(m.type),
                            m.body.type_name()));
  buf_.erase(0, kHeaderSize + length);
  return std::optional<Message>(std::move(m));
}

std::string socket_name(pid_t pid) { return fmt::format("utramp/{}", pid); }

void socket_address(pid_t pid, sockaddr_un* addr, socklen_t* len) {
  memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  const std::string name = socket_name(pid);
  // Abstract: a leading NUL, and the length says where the name ends (no NUL after it).
  memcpy(addr->sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

Result<Peer> peer_of(int fd) {
  ucred c{};
  socklen_t n = sizeof c;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &n) != 0)
    return make_error(Errc::io, fmt::format("SO_PEERCRED: {}", strerror(errno)));
  return Peer{c.pid, c.uid, c.gid};
}

bool has_cap_sys_ptrace(pid_t pid) {
  const std::string eff = status_field(pid, "CapEff:");
  if (eff.empty()) return false;
  const unsigned long long caps = strtoull(eff.c_str(), nullptr, 16);
  constexpr int kCapSysPtrace = 19;  // <linux/capability.h>
  return (caps >> kCapSysPtrace) & 1;
}

Result<void> peer_allowed(const Peer& peer, uid_t process_uid, bool peer_has_cap_sys_ptrace) {
  if (peer.uid == process_uid || peer.uid == 0 || peer_has_cap_sys_ptrace) return {};
  return make_error(Errc::invalid_argument,
                    fmt::format("refused a connection from process {} (uid {}): only uid {}, root or a "
                                "holder of CAP_SYS_PTRACE may control this process",
                                peer.pid, peer.uid, process_uid));
}

Result<void> server_is(const Peer& peer, pid_t pid, uid_t uid) {
  if (peer.pid == pid && peer.uid == uid) return {};
  return make_error(Errc::invalid_argument,
                    fmt::format("the socket @{} is held by process {} (uid {}), not by process {} "
                                "(uid {}): refused to talk to it",
                                socket_name(pid), peer.pid, peer.uid, pid, uid));
}

Result<int> connect_to(pid_t pid) {
  // Uid: real, effective, saved, fs. The agent compares with the effective uid.
  const long euid = uid_of(pid);
  if (euid < 0) return make_error(Errc::not_found, fmt::format("no process {}", pid));
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return make_error(Errc::io, fmt::format("socket: {}", strerror(errno)));
  sockaddr_un addr;
  socklen_t len;
  socket_address(pid, &addr, &len);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    const int err = errno;
    close(fd);
    if (err == ECONNREFUSED || err == ENOENT)
      return make_error(Errc::not_found,
                        fmt::format("process {} has no utramp agent listening (no socket @{}): it "
                                    "was not started under utramp, or its agent did not start",
                                    pid, socket_name(pid)));
    return make_error(Errc::io, fmt::format("connect to @{}: {}", socket_name(pid), strerror(err)));
  }
  auto peer = peer_of(fd);
  Result<void> ok = peer ? server_is(*peer, pid, static_cast<uid_t>(euid)) : Result<void>(peer.error());
  if (!ok) {
    close(fd);
    return std::move(ok).error();
  }
  return fd;
}

Result<void> send_message(int fd, const Message& m) {
  const std::string bytes = encode(m);
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error(Errc::io, fmt::format("sending a {} message: {}", type_name(m.type),
                                                        n < 0 ? strerror(errno) : "closed"));
    done += static_cast<size_t>(n);
  }
  return {};
}

Result<Message> receive_message(int fd, Decoder* d, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto m = d->next();
    if (!m) return std::move(m).error();
    if (*m) return std::move(**m);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return make_error(Errc::busy, fmt::format("no answer within {} ms", timeout_ms));
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return make_error(Errc::io, fmt::format("poll: {}", strerror(errno)));
    if (r == 0) continue;
    char buf[65536];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(Errc::io, fmt::format("receive: {}", strerror(errno)));
    if (n == 0) return make_error(Errc::io, "closed");
    d->feed(std::string_view(buf, static_cast<size_t>(n)));
  }
}

Result<json> call(pid_t pid, const Message& request, int timeout_ms) {
  auto fd = connect_to(pid);
  if (!fd) return std::move(fd).error();
  Decoder d;
  Result<Message> answer = make_error(Errc::io, "");
  if (auto s = send_message(*fd, request); !s) answer = std::move(s).error();
  else answer = receive_message(*fd, &d, timeout_ms);
  close(*fd);
  if (!answer && answer.error().code == Errc::io)
    // Refused (the agent closes a peer it does not accept before reading a byte: the
    // send or the receive sees it), or the process ended meanwhile.
    return make_error(Errc::io, fmt::format("its agent closed the connection without an answer ({}): it "
                                            "answers only uid {}, root, or a holder of CAP_SYS_PTRACE; its "
                                            "log says why",
                                            answer.error().message, uid_of(pid)));
  if (!answer) return std::move(answer).error();
  if (answer->type == MsgType::error) {
    const auto text = answer->body.find("error");
    return make_error(Errc::invalid_argument,
                      text != answer->body.end() && text->is_string() ? text->get<std::string>()
                                                                      : std::string("an error without its text"));
  }
  if (answer->type != MsgType::reply)
    return make_error(Errc::bad_format,
                      fmt::format("the agent answered with a {} message", type_name(answer->type)));
  return std::move(answer->body);
}

}  // namespace utramp::agent::control
