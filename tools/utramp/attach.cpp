#include "attach.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "agent/control_protocol.hpp"
#include "launch.hpp"
#include "os/dwarf.hpp"
#include "os/inject.hpp"
#include "probe/sigtrap_mask.hpp"
#include "trace/trace_dir.hpp"

namespace utramp::cli {

namespace {

namespace ctl = agent::control;

// How long the agent may take to canonicalise and attach every selected site of the
// process, while its threads run (the live patch protocol), and to remove them.
constexpr int kConfigureTimeoutMs = 60'000;

volatile sig_atomic_t g_interrupted = 0;

uint64_t mono_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1'000'000;
}

// The process's command line, as /proc/PID/cmdline has it.
std::vector<std::string> command_of(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
  std::vector<std::string> argv;
  for (std::string arg; std::getline(in, arg, '\0');) argv.push_back(arg);
  return argv;
}

std::string exe_of(pid_t pid) {
  char buf[4096];
  const ssize_t n = readlink(fmt::format("/proc/{}/exe", pid).c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Whether PID exists and has not ended (a zombie has: its parent did not reap it yet).
bool still_running(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

// Loads the agent into PID unless it is there already (its control channel answers:
// an earlier `record -p`, or a process started under utramp). Prints why not.
bool ensure_agent(pid_t pid, const std::string& me) {
  if (auto fd = ctl::connect_to(pid); fd) {
    close(*fd);
    return true;
  }
  const std::string agent = agent_library();
  auto loaded = os::inject_library(pid, agent);
  if (!loaded) {
    fmt::print(stderr, "{}: cannot attach to process {}: {}\n", me, pid, loaded.error().message);
    return false;
  }
  if (!loaded->handle) {
    // The loader's own reason. "static TLS": the agent's initial-exec thread-local
    // storage (a few pointers: tests/unit/boundary.cmake keeps it under 256 bytes) no
    // longer fits in the reserve glibc sets aside at start-up for libraries loaded
    // later, other libraries loaded that way having taken it.
    const bool tls = loaded->error.find("static TLS") != std::string::npos;
    fmt::print(stderr,
               "{}: cannot attach to process {}: its dynamic loader refused the agent: "
               "{}{}; the process was paused {:.2f} ms ({} thread{}) and runs on unchanged\n",
               me, pid, loaded->error,
               tls ? " (what is left of the C library's static TLS reserve for libraries loaded "
                     "into a running process is smaller than the agent's few hundred bytes: "
                     "docs/attach.md)"
                   : "",
               static_cast<double>(loaded->pause_ns) / 1e6, loaded->threads, loaded->threads == 1 ? "" : "s");
    return false;
  }
  fmt::print(stderr, "{}: the agent was loaded into process {} (paused {:.2f} ms, {} thread{})\n", me, pid,
             static_cast<double>(loaded->pause_ns) / 1e6, loaded->threads, loaded->threads == 1 ? "" : "s");
  return true;
}

// Threads of PID that block SIGTRAP get it out of their masks (os::unblock_signal)
// before the agent patches anything: a thread that reached one of a patch batch's int3s
// with SIGTRAP blocked would be ended, with the whole process, by the kernel (liblzma's
// workers block every signal, for one). Said on stderr; *changed: the threads whose mask
// was changed (the agent then keeps the program's signal functions from blocking it
// again: agent::Config::sigtrap_unblocked; a refused attach blocks it there again:
// block_sigtrap_again). False (said why) when the masks cannot be read; when they cannot
// be changed (ptrace refused) it is said and the agent decides.
bool unblock_sigtrap(pid_t pid, const std::string& me, std::vector<pid_t>* changed) {
  changed->clear();
  auto blocking = probe::threads_blocking_sigtrap(pid);
  if (!blocking) {
    fmt::print(stderr, "{}: process {}: reading its threads' signal masks: {}\n", me, pid, blocking.error().message);
    return false;
  }
  if (blocking->empty()) return true;
  std::vector<pid_t> tids;
  for (const probe::BlockingThread& t : *blocking) tids.push_back(static_cast<pid_t>(t.tid));
  auto done = os::unblock_signal(pid, tids, SIGTRAP);
  if (!done) {
    // Not a refusal yet: glibc blocks every signal for a moment in a thread that starts or
    // ends, which is no danger (the C library is not patched while threads run). The
    // agent refuses if a thread keeps SIGTRAP blocked when it looks.
    fmt::print(stderr, "{}: process {}: {} blocked SIGTRAP, which could not be unblocked: {}\n", me, pid,
               probe::describe(*blocking), done.error().message);
    return true;
  }
  *changed = std::move(*done);
  if (!changed->empty())
    fmt::print(stderr,
               "{}: process {}: SIGTRAP unblocked in {} (it was blocked there: a patch batch's int3 reached "
               "so would end the process); it stays unblocked after the detach (docs/attach.md)\n",
               me, pid, probe::describe(*blocking));
  return true;
}

// An attach that changed nothing else (the agent refused its configuration, or was never
// sent one) puts SIGTRAP back into the masks unblock_sigtrap took it out of, as it found
// them. Said either way.
void block_sigtrap_again(pid_t pid, const std::string& me, const std::vector<pid_t>& unblocked) {
  if (unblocked.empty()) return;
  auto done = os::block_signal(pid, unblocked, SIGTRAP);
  if (!done)
    fmt::print(stderr, "{}: process {}: SIGTRAP could not be blocked again in the {} thread(s) it was "
                       "unblocked in: {}\n", me, pid, unblocked.size(), done.error().message);
  else
    fmt::print(stderr, "{}: process {}: SIGTRAP blocked again in {} of the {} thread(s) it was unblocked in{}\n",
               me, pid, done->size(), unblocked.size(),
               done->size() < unblocked.size() ? " (the others ended or changed their mask meanwhile)" : "");
}

// A running process being recorded (or run eBPF programs in): the connection that
// configured its agent. The agent removes everything when this connection ends, whatever
// ends it (docs/attach.md).
class Attached : public RecordTarget {
 public:
  // Ctrl-C (or SIGTERM) stops the recording from the moment the agent is configured, not
  // only once wait() runs: the CLI says "Ctrl-C to stop" before it drains, and a Ctrl-C in
  // between killed the CLI (exit 130) instead of detaching cleanly.
  Attached(pid_t pid, int fd, double duration_s, std::string me)
      : pid_(pid), fd_(fd), duration_s_(duration_s), me_(std::move(me)) {
    g_interrupted = 0;
    struct sigaction stop {};
    stop.sa_handler = [](int) { g_interrupted = 1; };
    sigaction(SIGINT, &stop, &old_int_);
    sigaction(SIGTERM, &stop, &old_term_);
  }
  ~Attached() override {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    if (fd_ >= 0) close(fd_);
  }
  pid_t pid() const override { return pid_; }

  // Drains until Ctrl-C (or SIGTERM), --duration, or the connection's end (the process
  // exited or exec'd: its socket is closed with it), then asks the agent to detach.
  Ended wait(const std::function<bool()>& work, int idle_ms) override {
    const uint64_t t0 = mono_ms();
    const uint64_t until = duration_s_ > 0 ? t0 + static_cast<uint64_t>(duration_s_ * 1000) : UINT64_MAX;
    std::string why;
    bool gone = false;
    for (;;) {
      const bool busy = work();
      if (g_interrupted) {
        why = "interrupted";
        break;
      }
      if (mono_ms() >= until) {
        why = fmt::format("--duration {} s ended", duration_s_);
        break;
      }
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, busy ? 0 : idle_ms) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
        // Nothing is sent unasked: readable means closed.
        gone = true;
        break;
      }
    }
    const double secs = static_cast<double>(mono_ms() - t0) / 1000.0;
    Ended e;
    if (gone) {
      // Its end, or an exec (the channel is close-on-exec; the new image has no agent).
      // Its exit closes the socket a moment before it becomes a zombie: a little time
      // tells an exit from an exec.
      bool alive = still_running(pid_);
      for (int i = 0; alive && i < 20; ++i) {
        usleep(10'000);
        alive = still_running(pid_);
      }
      const bool rec = me_ == "utramp record";
      e.how = alive ? fmt::format("exec'd or closed the control channel after {:.1f} s: {} stopped", secs,
                                  rec ? "recording" : "the programs")
                    : fmt::format("exited after {:.1f} s of {}", secs, rec ? "recording" : "running the programs");
      fmt::print(stderr, "{}: process {} {}; what was {} is kept\n", me_, pid_, e.how,
                 rec ? "recorded" : "collected");
      return e;
    }
    Result<Ended> detached = detach(why, secs);
    if (!detached) {
      e.how = fmt::format("detach failed: {}", detached.error().message);
      e.exit_code = 1;
      fmt::print(stderr, "{}: process {}: {}\n", me_, pid_, e.how);
      return e;
    }
    return *detached;
  }

 private:
  Result<Ended> detach(const std::string& why, double secs) {
    // What this connection made, and nothing of another client's.
    if (auto s = ctl::send_message(fd_, {ctl::MsgType::release, nlohmann::json::object()}); !s) return s.error();
    ctl::Decoder d;
    auto m = ctl::receive_message(fd_, &d, kConfigureTimeoutMs);
    if (!m) return m.error();
    if (m->type == ctl::MsgType::error) return make_error(Errc::io, m->body.value("error", std::string("?")));
    const auto& b = m->body;
    Ended e;
    e.how = fmt::format("detached after {:.1f} s ({})", secs, why);
    std::string left;
    if (const auto l = b.find("left"); l != b.end() && l->is_array() && !l->empty())
      for (const auto& x : *l) left += fmt::format("; left: {}", x.is_string() ? x.get<std::string>() : x.dump());
    const size_t probes = b.value("probes_detached", size_t{0});
    fmt::print(stderr, "{}: detached from process {}: {} links{} removed, {} sites back to the file's bytes{}\n", me_,
               pid_, b.value("links_detached", 0), probes ? fmt::format(" and {} probes", probes) : "",
               b.value("sites_restored", 0), left);
    if (const auto er = b.find("errors"); er != b.end() && er->is_array())
      for (const auto& x : *er)
        fmt::print(stderr, "{}: detach: {}\n", me_, x.is_string() ? x.get<std::string>() : x.dump());
    close(fd_);
    fd_ = -1;
    return e;
  }

  pid_t pid_;
  int fd_;
  double duration_s_;
  std::string me_;
  struct sigaction old_int_ {}, old_term_ {};
};

}  // namespace

std::string program_of(pid_t pid) { return exe_of(pid); }

bool parse_attach_duration(const std::string& text, pid_t pid, const std::string& me, double* seconds) {
  *seconds = 0;
  if (text.empty()) return true;
  uint64_t ns = 0;
  if (!pid || !parse_duration(text, &ns) || ns == 0) {
    fmt::print(stderr, "{}: --duration '{}': {}\n", me, text,
               pid ? "expected a duration above 0: a number and one of ns, us, ms, s (10s, 500ms)"
                   : "only with -p PID (a program utramp starts is followed until it ends)");
    return false;
  }
  *seconds = static_cast<double>(ns) / 1e9;
  return true;
}

int check_attach(pid_t pid, const std::string& me, bool recording) {
  // Every refusal that needs no ptrace, before the process is touched.
  auto facts = os::check_attachable(pid);
  if (!facts) {
    fmt::print(stderr, "{}: cannot attach: {}\n", me, facts.error().message);
    return 2;
  }
  // An agent there already (an earlier `record -p` or `run -p`, or the process was
  // started under utramp) that cannot take a recording now: said before anything is
  // created. eBPF programs (`run -p`) go beside whatever is there.
  if (!recording) return 0;
  if (auto fd = ctl::connect_to(pid); fd) {
    close(*fd);
    auto shown = ctl::call(pid, {ctl::MsgType::show, nlohmann::json::object()}, 5000);
    if (!shown) {
      fmt::print(stderr, "{}: process {}: its agent does not answer: {}\n", me, pid, shown.error().message);
      return 2;
    }
    const nlohmann::json a = shown->value("agent", nlohmann::json::object());
    if (a.value("launched", false)) {
      fmt::print(stderr,
                 "{}: cannot attach to process {}: it was started under utramp (its agent is "
                 "configured by its launcher; trace directory {}): a second recording cannot be attached; "
                 "`utramp run -p`, `utramp show -p {}` and `utramp detach -p {}` work on it\n",
                 me, pid, a.value("trace_dir", std::string("?")), pid, pid);
      return 2;
    }
    // One recording at a time (the tracer has one set of rings and options for every
    // thread); eBPF programs of `run -p` clients do not stand in its way.
    if (a.value("recording", false)) {
      fmt::print(stderr, "{}: cannot attach to process {}: a recording (utramp record -p) is already attached "
                         "(trace directory {}); one recording at a time (`utramp run -p` works beside it)\n",
                 me, pid, a.value("trace_dir", std::string("?")));
      return 2;
    }
  }
  return 0;
}

std::unique_ptr<RecordTarget> attach_configured(pid_t pid, const agent::Config& cfg, double duration_s,
                                                const std::string& me, nlohmann::json* answer) {
  if (!ensure_agent(pid, me)) return nullptr;
  std::vector<pid_t> unblocked;
  if (!unblock_sigtrap(pid, me, &unblocked)) return nullptr;
  agent::Config sent_cfg = cfg;
  sent_cfg.sigtrap_unblocked = !unblocked.empty();
  auto fd = ctl::connect_to(pid);
  if (!fd) {
    fmt::print(stderr, "{}: process {}: {}\n", me, pid, fd.error().message);
    block_sigtrap_again(pid, me, unblocked);
    return nullptr;
  }
  auto conn = std::make_unique<Attached>(pid, *fd, duration_s, me);
  auto sent = ctl::send_message(*fd, {ctl::MsgType::apply_config,
                                      {{"config", nlohmann::json::parse(agent::dump_config(sent_cfg))}}});
  ctl::Decoder d;
  Result<ctl::Message> m = sent ? ctl::receive_message(*fd, &d, kConfigureTimeoutMs)
                                : Result<ctl::Message>(sent.error());
  // The agent's answer a refusal: it changed nothing (without an answer, it may have).
  const bool refused = !sent || (m && m->type == ctl::MsgType::error);
  if (m && m->type == ctl::MsgType::error) m = make_error(Errc::busy, m->body.value("error", std::string("?")));
  if (!m) {
    if (!still_running(pid)) {  // its end closed the connection before the answer
      fmt::print(stderr, "{}: process {} ended before its agent answered ({})\n", me, pid, m.error().message);
    } else {
      fmt::print(stderr, "{}: process {} refused the configuration: {}; nothing was changed\n", me, pid,
                 m.error().message);
      if (refused) block_sigtrap_again(pid, me, unblocked);
    }
    return nullptr;
  }
  *answer = std::move(m->body);
  return conn;
}

int run_record_attach(pid_t pid, const RecordOptions& o, double duration_s, RecordResult* out) {
  if (!o.command.empty()) {
    fmt::print(stderr, "utramp record: -p attaches to a running process: give no program as well\n");
    return 2;
  }
  if (const int rc = check_attach(pid, "utramp record", /*recording=*/true)) return rc;
  trace::TraceInfo info;
  info.command = command_of(pid);
  info.binary = exe_of(pid);
  info.build_id = os::build_id_hex(info.binary);
  return record(
      o, std::move(info),
      [&](const agent::Config& cfg, const std::string&, int* exit_code) -> std::unique_ptr<RecordTarget> {
        *exit_code = 2;
        nlohmann::json m;
        auto conn = attach_configured(pid, cfg, duration_s, "utramp record", &m);
        if (!conn) return nullptr;
        // Functions the agent could not trace (a prologue that cannot be relocated, or,
        // while a thread keeps SIGTRAP blocked, a site only an int3 could divert:
        // docs/attach.md, "Limits") are said, with the first reason.
        if (const size_t n = m.value("not_traced", size_t{0}))
          fmt::print(stderr,
                     "utramp record: {} function{} of process {} not traced (the agent's log in {} has each): "
                     "{}\n",
                     n, n == 1 ? "" : "s", pid, cfg.trace_dir, m.value("not_traced_first", std::string()));
        fmt::print(stderr, "utramp record: recording process {} ({} links attached){}; Ctrl-C to stop\n", pid,
                   m.value("links", 0), duration_s > 0 ? fmt::format(" for {} s", duration_s) : std::string());
        return conn;
      },
      out);
}

}  // namespace utramp::cli
