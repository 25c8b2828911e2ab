// The control channel on a process started under `utramp record` (docs/attach.md, "The
// control channel"): attach_target (8 worker threads calling work() in a loop, one
// blocked in read(), one inside a signal handler), built by gcc and clang with and
// without a compiler site. `utramp show -p` lists the patched function; `utramp detach -p`
// puts the program's whole .text back to the file's bytes (read from /proc/PID/mem)
// while the threads run, the program's output is what it is untraced, and the recording
// ends readable. Another user is refused before anything is read; a malformed message
// or a client killed mid-message ends that connection only.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/config.hpp"
#include "agent/control_protocol.hpp"
#include "child_io.hpp"
#include "cli_runner.hpp"
#include "os/elf_file.hpp"
#include "second_user.hpp"
#include "text_vs_file.hpp"
#include "temp_dir.hpp"

namespace {

using nlohmann::json;
using utramp::test::read_rest;
using utramp::test::run_cli;
using utramp::test::TempDir;
using utramp::test::text_vs_file;
using utramp::test::TextDiff;
namespace ctl = utramp::agent::control;

std::string target_path(const std::string& variant) {
  return std::string(CTL_TARGET_DIR) + "/ctl_target_" + variant;
}

// `utramp record -q -o DIR --only work -- TARGET 8`, its stdin a pipe ("q" ends the target),
// its stdout a pipe (the target's "ready PID", then its result), its stderr a file.
class Recorded {
 public:
  Recorded(const std::string& target, const std::string& dir) : err_path_(dir + "/record.err") {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return;
    record_ = fork();
    if (record_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      const int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (err >= 0) dup2(err, 2);
      const std::string trace = dir + "/trace";
      execl(UTRAMP_CLI, UTRAMP_CLI, "record", "-q", "-o", trace.c_str(), "--only", "work", "--", target.c_str(), "8",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    in_ = in[1];
    out_ = out[0];
    const std::string line = read_line();
    if (line.starts_with("ready ")) target_ = std::atoi(line.c_str() + 6);
  }
  ~Recorded() {
    if (target_ > 0 && record_ > 0) kill(target_, SIGKILL);
    if (record_ > 0) reap();
    if (in_ >= 0) close(in_);
    if (out_ >= 0) close(out_);
  }
  Recorded(const Recorded&) = delete;
  Recorded& operator=(const Recorded&) = delete;

  pid_t pid() const { return target_; }
  bool alive() const { return target_ > 0 && kill(target_, 0) == 0; }
  std::string errors() const {
    std::ifstream in(err_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // Ends the target; what it printed after "ready", and record's exit code.
  std::pair<std::string, int> finish() {
    (void)!write(in_, "q", 1);
    close(in_);
    in_ = -1;
    const std::string rest = read_rest(out_);
    target_ = -1;
    return {rest, reap()};
  }

 private:
  std::string read_line() { return utramp::test::read_line(out_); }
  int reap() { return utramp::test::reap_child(record_); }
  std::string err_path_;
  pid_t record_ = -1, target_ = -1;
  int in_ = -1, out_ = -1;
};

json show(pid_t pid) {
  auto r = run_cli({"show", "-p", std::to_string(pid), "--json"});
  if (r.exit_code != 0) return json{{"failed", r.err}};
  return json::parse(r.out, nullptr, false);
}

const json* function_named(const json& j, const std::string& name) {
  if (!j.contains("functions")) return nullptr;
  for (const json& f : j["functions"])
    if (f.value("name", "") == name) return &f;
  return nullptr;
}

class ControlTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ControlTest, ShowThenDetachWhileThreadsRun) {
  const std::string target = target_path(GetParam());
  TempDir dir("utramp-ctl");
  // What the program prints untraced: the reference its traced run must match.
  const auto plain = utramp::test::run_program({target, "8"}, {.stdin_path = "/dev/null"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;

  Recorded rec(target, dir.path);
  ASSERT_GT(rec.pid(), 0) << rec.errors();

  // show -p: work is patched (a jump to its trampoline), with the tracer's link.
  const json before = show(rec.pid());
  ASSERT_FALSE(before.is_discarded());
  ASSERT_FALSE(before.contains("failed")) << before["failed"];
  EXPECT_EQ(before["pid"], rec.pid());
  EXPECT_EQ(before["agent"]["state"], "attached");
  const json* work = function_named(before, "work");
  ASSERT_NE(work, nullptr) << before.dump(2);
  EXPECT_EQ((*work)["site"]["state"], "jmp");
  EXPECT_EQ((*work)["links"][0]["type"], "tracer");
  ASSERT_FALSE(before["not_tracked"].empty());  // says what it does not count
  const auto text = run_cli({"show", "-p", std::to_string(rec.pid())});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("work"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("agent attached"), std::string::npos) << text.out;

  // Patched now: the text differs from the file (the jump, and utramp's NOPs).
  const TextDiff patched = text_vs_file(rec.pid(), target);
  ASSERT_TRUE(patched.read);
  EXPECT_GT(patched.bytes, 0u);

  // detach -p while the 8 workers call work(): every byte back, the process running.
  const auto det = run_cli({"detach", "-p", std::to_string(rec.pid())});
  EXPECT_EQ(det.exit_code, 0) << det.out << det.err;
  EXPECT_NE(det.out.find("detached: 1 links removed"), std::string::npos) << det.out;
  const TextDiff after = text_vs_file(rec.pid(), target);
  ASSERT_TRUE(after.read);
  EXPECT_EQ(after.bytes, 0u) << "bytes still changed:" << after.where;
  EXPECT_TRUE(rec.alive());

  const json later = show(rec.pid());
  EXPECT_EQ(later["agent"]["state"], "detached");
  EXPECT_TRUE(later["functions"].empty()) << later.dump(2);
  EXPECT_EQ(later["sites_as_nop"], 0);
  EXPECT_EQ(later["library_calls_hooked"], 0);
  // Twice: nothing left to do, said so.
  const auto again = run_cli({"detach", "-p", std::to_string(rec.pid())});
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_NE(again.out.find("already detached"), std::string::npos) << again.out;

  // The program ends as it would untraced; the recording ends normally and is readable,
  // with the calls made before the detach.
  auto [out, code] = rec.finish();
  EXPECT_EQ(code, 0) << rec.errors();
  EXPECT_EQ(out, plain.out.substr(plain.out.find('\n') + 1));
  const auto replay = run_cli({"report", dir.path + "/trace"});
  EXPECT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_NE(replay.out.find("work"), std::string::npos) << replay.out;
}

INSTANTIATE_TEST_SUITE_P(Targets, ControlTest, ::testing::Values("gcc_plain", "gcc_pfe", "clang_pfe"));

// A process with no agent, or none at all: a clear refusal, exit 2.
TEST(Control, NoAgent) {
  const auto r = run_cli({"show", "-p", std::to_string(getpid())});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no utramp agent listening"), std::string::npos) << r.err;
  const auto d = run_cli({"detach", "-p", "999999999"});
  EXPECT_EQ(d.exit_code, 2);
}

// Sends BYTES on a new connection to PID's agent and returns what comes back until it
// closes ("" when it closed without a word), at most 5 s.
std::string exchange(pid_t pid, const std::string& bytes) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a;
  socklen_t len;
  ctl::socket_address(pid, &a, &len);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    close(fd);
    return "connect failed";
  }
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  (void)!send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
  close(fd);
  return got;
}

TEST(Control, MalformedOrKilledClientEndsOnlyItsConnection) {
  const std::string target = target_path("gcc_pfe");
  TempDir dir("utramp-ctl");
  Recorded rec(target, dir.path);
  ASSERT_GT(rec.pid(), 0) << rec.errors();

  // A connection kept open across the others.
  auto keep = ctl::connect_to(rec.pid());
  ASSERT_TRUE(keep) << keep.error().message;

  // Garbage: an error answer naming what was wrong, then the connection is closed.
  const std::string bad = exchange(rec.pid(), "GET / HTTP/1.1\r\n\r\n");
  EXPECT_NE(bad.find("bad magic"), std::string::npos) << bad;
  // A header announcing more than the bound.
  std::string big = ctl::encode({ctl::MsgType::show, json::object()}).substr(0, 8);
  big += std::string("\xff\xff\xff\x7f", 4);
  EXPECT_NE(exchange(rec.pid(), big).find("at most"), std::string::npos);

  // A client killed with half a message sent: the agent sees the end of its connection.
  const pid_t client = fork();
  ASSERT_GE(client, 0);
  if (client == 0) {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a;
    socklen_t len;
    ctl::socket_address(rec.pid(), &a, &len);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) _exit(1);
    const std::string half = ctl::encode({ctl::MsgType::detach, json::object()}).substr(0, 7);
    (void)!write(fd, half.data(), half.size());
    pause();
    _exit(0);
  }
  // Seen as a client, then gone within the bound once killed (docs/attach.md: 1 s).
  bool seen = false;
  json last;
  for (int i = 0; i < 100 && !seen; ++i) {
    last = show(rec.pid());
    for (const json& c : last["clients"]) seen = seen || c.value("pid", 0) == client;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(seen) << "client " << client << ", last answer " << last.dump();
  kill(client, SIGKILL);
  waitpid(client, nullptr, 0);
  const auto killed = std::chrono::steady_clock::now();
  bool gone = false;
  while (!gone && std::chrono::steady_clock::now() - killed < std::chrono::seconds(1)) {
    gone = true;
    for (const json& c : show(rec.pid())["clients"]) gone = gone && c.value("pid", 0) != client;
  }
  EXPECT_TRUE(gone) << "the killed client's connection was still open after 1 s";

  // Nothing changed: work is still patched, and the connection kept open still works.
  const json now = show(rec.pid());
  const json* work = function_named(now, "work");
  ASSERT_NE(work, nullptr);
  EXPECT_EQ((*work)["site"]["state"], "jmp");
  ctl::Decoder d;
  ASSERT_TRUE(ctl::send_message(*keep, {ctl::MsgType::show, json::object()}));
  auto answer = ctl::receive_message(*keep, &d, 5000);
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(answer->type, ctl::MsgType::reply);
  close(*keep);

  // A configuration (record -p's hand-over): the launcher's format, checked under the
  // file's rules; this agent, configured at start-up, takes none (a second recording of
  // a process started under utramp is refused, saying so).
  utramp::agent::Config cfg;
  cfg.shm_path = "/dev/shm/none";
  cfg.trace_dir = "/tmp";  // others may write there
  const auto apply = [&](const utramp::agent::Config& c) {
    auto r = ctl::call(rec.pid(), {ctl::MsgType::apply_config, {{"config", json::parse(utramp::agent::dump_config(c))}}},
                       5000);
    return r ? std::string("(accepted)") : r.error().message;
  };
  EXPECT_NE(apply(cfg).find("writable by others"), std::string::npos) << apply(cfg);
  cfg.trace_dir = dir.path;
  EXPECT_NE(apply(cfg).find("was started under utramp"), std::string::npos) << apply(cfg);

  // The CLI says the same before it creates anything: no trace directory is made.
  const std::string second = dir.path + "/second";
  auto r = run_cli({"record", "-p", std::to_string(rec.pid()), "-o", second});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("it was started under utramp"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(second));

  auto [out, code] = rec.finish();
  EXPECT_EQ(code, 0) << rec.errors();
  EXPECT_NE(out.find("ok: 8 workers"), std::string::npos) << out;
}

// Another user (nobody) may connect to the abstract socket, but is closed before a byte
// is read: its detach does nothing, and the CLI run as nobody says it got no answer.
TEST(Control, AnotherUserIsRefused) {
  if (const std::string why = utramp::test::no_second_user(); !why.empty()) GTEST_SKIP() << why;
  const std::string target = target_path("gcc_pfe");
  TempDir dir("utramp-ctl");
  Recorded rec(target, dir.path);
  ASSERT_GT(rec.pid(), 0) << rec.errors();
  const std::string detach = ctl::encode({ctl::MsgType::detach, json::object()});
  const pid_t pid = rec.pid();
  // As nobody: connected, then closed with no answer at all.
  EXPECT_TRUE(utramp::test::as_nobody([&] { return exchange(pid, detach).empty(); }));
  // The CLI as nobody: refused, exit 2.
  EXPECT_TRUE(utramp::test::as_nobody([&] {
    const auto r = run_cli({"detach", "-p", std::to_string(pid)});
    return r.exit_code == 2 && r.err.find("closed the connection without an answer") != std::string::npos;
  }));
  // Nothing changed.
  const json now = show(pid);
  EXPECT_EQ(now["agent"]["state"], "attached");
  const json* work = function_named(now, "work");
  ASSERT_NE(work, nullptr);
  EXPECT_EQ((*work)["site"]["state"], "jmp");
  auto [out, code] = rec.finish();
  EXPECT_EQ(code, 0) << rec.errors();
}

}  // namespace
