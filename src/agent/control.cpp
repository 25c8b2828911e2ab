#include "agent/control.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <ctime>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "agent/control_protocol.hpp"
#include "agent/trust.hpp"
#include "arch/cpu.hpp"
#include "os/text_writer.hpp"
#include "tramp/threads.hpp"

namespace utramp::agent {

namespace {

using nlohmann::json;
namespace ctl = control;

// At most this many connections at once; one more is answered with an error and closed.
constexpr size_t kMaxClients = 8;
// A client that does not take an answer within this long is dropped (the agent's lock
// is held while answering).
constexpr int kSendTimeoutMs = 2000;

// A descriptor is ours while it names the socket we made (device and inode): a program
// may close every descriptor it did not open itself (daemons do), and the number would
// then name whatever it opens next, which must never be read, accepted on or closed here.
struct Owned {
  int fd = -1;
  dev_t dev = 0;
  ino_t ino = 0;
  bool still() const {
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
  }
  static Owned of(int fd) {
    struct stat st{};
    fstat(fd, &st);
    return {fd, st.st_dev, st.st_ino};
  }
};

struct Client {
  Owned own;
  int fd = -1;
  uint64_t id = 0;
  ctl::Peer peer;
  std::string command;  // the peer's command line, for show
  time_t since = 0;
  ctl::Decoder decoder;
  bool owns = false;  // its apply_config was taken: its end releases what that made
};

struct Control {
  ControlHandlers h;
  int listen_fd = -1;
  Owned listen;
  std::vector<Client> clients;  // touched only by the control thread, and by show under the lock
  uint64_t next_id = 1;
};

Control* g_ctl = nullptr;

void logf(const std::string& text) {
  if (g_ctl && g_ctl->h.log) g_ctl->h.log(text.c_str());
}

void answer(Client& c, ctl::MsgType type, json body) {
  std::string bytes = ctl::encode({type, std::move(body)});
  if (bytes.size() > ctl::kHeaderSize + ctl::kMaxPayload)
    bytes = ctl::encode({ctl::MsgType::error,
                         {{"error", fmt::format("the answer is {} bytes, over the protocol's bound of {}",
                                                bytes.size(), ctl::kMaxPayload)}}});
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = send(c.fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // gone or too slow (SO_SNDTIMEO): its connection ends below
    done += static_cast<size_t>(n);
  }
}

// One request of C, with the agent's lock held. False: close the connection.
bool handle(Client& c, const ctl::Message& m) {
  switch (m.type) {
    case ctl::MsgType::show:
      answer(c, ctl::MsgType::reply, g_ctl->h.show());
      return true;
    case ctl::MsgType::release: {
      auto r = g_ctl->h.release(c.id);
      if (r) answer(c, ctl::MsgType::reply, std::move(*r));
      else answer(c, ctl::MsgType::error, {{"error", r.error().message}});
      logf(fmt::format("control: client {} (process {}) released what it made: {}", c.id, c.peer.pid,
                       r ? "done" : r.error().message));
      c.owns = false;
      return true;
    }
    case ctl::MsgType::detach: {
      auto r = g_ctl->h.detach();
      if (r) answer(c, ctl::MsgType::reply, std::move(*r));
      else answer(c, ctl::MsgType::error, {{"error", r.error().message}});
      logf(fmt::format("control: detach asked by process {} (uid {}): {}", c.peer.pid, c.peer.uid,
                       r ? "done" : r.error().message));
      return true;
    }
    case ctl::MsgType::apply_config: {
      // The configuration of an agent loaded into a running process (record -p, run -p), in the
      // launcher's format, trusted under the file's rules (agent/trust.hpp) before the
      // agent sees it.
      const auto cfg = m.body.find("config");
      auto trusted = cfg != m.body.end() && cfg->is_object()
                         ? trust_sent_config(cfg->dump())
                         : Result<TrustedConfig>(make_error(Errc::invalid_argument,
                                                            "an apply_config message holds no \"config\" object"));
      Result<json> r = !trusted ? Result<json>(trusted.error())
                       : g_ctl->h.configure
                           ? g_ctl->h.configure(std::move(*trusted), c.id)
                           : Result<json>(make_error(Errc::busy, "this agent takes no configuration"));
      // Logged before the answer: once answered, the client may remove the directory the
      // log is in (`run -p` removes its scratch directory at once).
      logf(fmt::format("control: configuration sent by client {} (process {}, uid {}): {}", c.id, c.peer.pid,
                       c.peer.uid, r ? "taken" : r.error().message));
      if (r) {
        c.owns = true;
        answer(c, ctl::MsgType::reply, std::move(*r));
      } else {
        answer(c, ctl::MsgType::error, {{"error", r.error().message}});
      }
      return true;
    }
    case ctl::MsgType::reply:
    case ctl::MsgType::error:
      break;
  }
  answer(c, ctl::MsgType::error,
         {{"error", fmt::format("a {} message is an answer, not a request", ctl::type_name(m.type))}});
  return false;
}

void drop(size_t i, const char* why) {
  Client& c = g_ctl->clients[i];
  if (why) logf(fmt::format("control: connection of process {} closed: {}", c.peer.pid, why));
  if (c.owns) {
    // A client that configured the agent is gone (ended, or killed: its socket closed
    // with it). What it made is removed now, in this wake-up, and nothing of another
    // client's; after its release, or a `detach`, there is nothing left to remove.
    auto r = g_ctl->h.release(c.id);
    logf(fmt::format("control: client {} (process {}) that configured the agent is gone: {}", c.id, c.peer.pid,
                     r ? r->dump() : r.error().message));
  }
  if (c.own.still()) close(c.fd);
  g_ctl->clients.erase(g_ctl->clients.begin() + static_cast<std::ptrdiff_t>(i));
}

// Process PID's command line, its arguments joined by spaces (shortened), for show.
std::string command_line(pid_t pid) {
  std::string text;
  const int fd = open(fmt::format("/proc/{}/cmdline", pid).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buf[512];
  const ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  for (ssize_t i = 0; i < n; ++i) text += buf[i] ? buf[i] : ' ';
  while (!text.empty() && text.back() == ' ') text.pop_back();
  if (n == static_cast<ssize_t>(sizeof buf)) text += "...";
  return text;
}

void accept_one() {
  const int fd = accept4(g_ctl->listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  // Checked before a byte is read: another user is closed at once, and nothing changes.
  auto peer = ctl::peer_of(fd);
  Result<void> ok = peer ? ctl::peer_allowed(*peer, geteuid(), ctl::has_cap_sys_ptrace(peer->pid))
                         : Result<void>(peer.error());
  if (!ok) {
    logf(fmt::format("control: {}", ok.error().message));
    close(fd);
    return;
  }
  timeval tv{kSendTimeoutMs / 1000, (kSendTimeoutMs % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  Client c;
  c.fd = fd;
  c.own = Owned::of(fd);
  c.peer = *peer;
  c.since = time(nullptr);
  c.command = command_line(peer->pid);
  if (g_ctl->clients.size() >= kMaxClients) {
    answer(c, ctl::MsgType::error,
           {{"error", fmt::format("{} clients are connected already, the most this agent serves", kMaxClients)}});
    close(fd);
    return;
  }
  c.id = g_ctl->next_id++;
  g_ctl->clients.push_back(std::move(c));
}

// Reads what C sent and answers every whole request. False: close it.
bool serve(Client& c) {
  char buf[65536];
  const ssize_t n = recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) return false;  // the client closed (or was killed: the kernel closed it)
  c.decoder.feed(std::string_view(buf, static_cast<size_t>(n)));
  for (;;) {
    auto m = c.decoder.next();
    if (!m) {
      // Malformed: that connection only ends, told why.
      answer(c, ctl::MsgType::error, {{"error", m.error().message}});
      logf(fmt::format("control: process {}: {}", c.peer.pid, m.error().message));
      return false;
    }
    if (!*m) return true;
    if (!handle(c, **m)) return false;
  }
}

void* control_thread(void*) {
  tramp::t_utramp_thread = true;  // never traced: its calls are utramp's
  prctl(PR_SET_NAME, "utramp-ctl", 0, 0, 0);
  std::recursive_mutex& mu = *g_ctl->h.lock;
  std::vector<pollfd> fds;
  mu.lock();
  for (;;) {
    if (!g_ctl->listen.still()) {
      logf("control: the program closed the control socket; the control channel stops");
      break;
    }
    for (size_t i = g_ctl->clients.size(); i > 0; --i)
      if (!g_ctl->clients[i - 1].own.still()) drop(i - 1, "the program closed its descriptor");
    fds.clear();
    fds.push_back({g_ctl->listen_fd, POLLIN, 0});
    for (const Client& c : g_ctl->clients) fds.push_back({c.fd, POLLIN, 0});
    // Parked: in utramp's own code, in a system call made directly (os/text_writer.hpp).
    os::set_own_thread_parked(true);
    mu.unlock();
    long r;
    do {
      r = arch::raw_syscall6(SYS_poll, reinterpret_cast<long>(fds.data()), static_cast<long>(fds.size()),
                             -1);
    } while (r == -EINTR);
    mu.lock();
    os::set_own_thread_parked(false);
    if (r < 0) {
      logf(fmt::format("control: poll: {}; the control channel stops", strerror(static_cast<int>(-r))));
      break;
    }
    // Clients first (by fd: the vector changes as they go), then new connections.
    for (size_t k = 1; k < fds.size(); ++k) {
      if (!fds[k].revents) continue;
      for (size_t i = 0; i < g_ctl->clients.size(); ++i)
        if (g_ctl->clients[i].fd == fds[k].fd) {
          if (!serve(g_ctl->clients[i])) drop(i, nullptr);
          break;
        }
    }
    if (fds[0].revents & POLLIN) accept_one();
  }
  mu.unlock();
  return nullptr;
}

}  // namespace

Result<void> start_control(const ControlHandlers& h) {
  if (g_ctl) return {};
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return make_error(Errc::io, fmt::format("control channel: socket: {}", strerror(errno)));
  sockaddr_un addr;
  socklen_t len;
  ctl::socket_address(getpid(), &addr, &len);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 8) != 0) {
    const int err = errno;
    close(fd);
    return make_error(Errc::busy,
                      fmt::format("control channel: cannot listen on @{}: {}{}", ctl::socket_name(getpid()),
                                  strerror(err),
                                  err == EADDRINUSE ? " (another process holds the name: show -p and "
                                                      "detach -p will refuse it)"
                                                    : ""));
  }
  g_ctl = new Control();
  g_ctl->h = h;
  g_ctl->listen_fd = fd;
  g_ctl->listen = Owned::of(fd);
  // Its signals are the program's to receive on its own threads: every one is blocked
  // here but those a fault or a patch batch's int3 raises in this thread.
  sigset_t all, old;
  sigfillset(&all);
  for (int s : {SIGTRAP, SIGSEGV, SIGBUS, SIGILL, SIGFPE}) sigdelset(&all, s);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  const int err = pthread_create(&t, nullptr, control_thread, nullptr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (err != 0) {
    close(fd);
    delete g_ctl;
    g_ctl = nullptr;
    return make_error(Errc::io, fmt::format("control channel: thread: {}", strerror(err)));
  }
  pthread_detach(t);
  return {};
}

void control_after_fork_child() {
  if (!g_ctl) return;
  // The parent's thread was parked (fork_prepare holds the agent's lock, which it leaves
  // its wait only with): it does not exist here.
  os::set_own_thread_parked(false);
  if (g_ctl->listen.still()) close(g_ctl->listen_fd);
  for (Client& c : g_ctl->clients)
    if (c.own.still()) close(c.fd);
  g_ctl = nullptr;  // the parent's, leaked in the child
}

json control_clients() {
  json out = json::array();
  if (!g_ctl) return out;
  for (const Client& c : g_ctl->clients) {
    struct tm t{};
    gmtime_r(&c.since, &t);
    char since[32];
    strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &t);
    out.push_back({{"id", c.id}, {"pid", c.peer.pid}, {"uid", c.peer.uid}, {"command", c.command},
                   {"since", since}, {"configured", c.owns}});
  }
  return out;
}

}  // namespace utramp::agent
