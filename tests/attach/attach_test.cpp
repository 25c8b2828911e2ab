// Attaching to a running process: the ptrace injector (os/inject.hpp) on a target with
// 8 worker threads, one blocked in read() and one inside a signal handler; and
// `utramp record -p` with each refusal, the process left running unchanged each time.
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child_io.hpp"
#include "cli_runner.hpp"
#include "os/inject.hpp"
#include "second_user.hpp"
#include "temp_dir.hpp"

namespace {

using utramp::test::read_file;
using utramp::test::read_rest;
using utramp::test::run_cli;
using utramp::test::TempDir;

// attach_target (or another program that speaks its protocol) as a child: its stdin a
// pipe the test writes "q" into, its stdout a pipe read for "ready PID" and its result.
class Target {
 public:
  Target(const std::string& program, int workers, const std::vector<std::string>& env = {}) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
      const std::string n = std::to_string(workers);
      execl(program.c_str(), program.c_str(), n.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    in_ = in[1];
    out_ = out[0];
    ready_ = read_line().starts_with("ready ");
  }
  ~Target() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      reap();
    }
    if (in_ >= 0) close(in_);
    if (out_ >= 0) close(out_);
  }
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;

  pid_t pid() const { return pid_; }
  bool ready() const { return ready_; }
  bool running() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }

  // Tells it to end; what it printed after "ready", and its exit code.
  std::pair<std::string, int> finish() {
    (void)!write(in_, "q", 1);
    close(in_);
    in_ = -1;
    const std::string rest = read_rest(out_);
    const int code = reap();
    return {rest, code};
  }

 private:
  std::string read_line() { return utramp::test::read_line(out_); }
  int reap() { return utramp::test::reap_child(pid_); }
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  bool ready_ = false;
};

// No thread of PID is traced any more.
bool no_tracer_left(pid_t pid) {
  for (const auto& e : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid))) {
    std::ifstream in(e.path() / "status");
    for (std::string line; std::getline(in, line);)
      if (line.starts_with("TracerPid:") && std::atoi(line.c_str() + 10) != 0) return false;
  }
  return true;
}

bool maps_name(pid_t pid, const std::string& what) {
  return read_file(fmt::format("/proc/{}/maps", pid)).find(what) != std::string::npos;
}

constexpr const char* kUntouched = "ok: 8 workers, calls made\n";

// The library's constructor runs in the target; every thread is let go, none stays
// traced; the blocked read and the thread in its signal handler carry on; the
// program's results and output are those of an untouched run. Ten times in a row
// (the second and later dlopens find the library loaded: each still stops every
// thread and puts each back).
TEST(Inject, LoadsALibraryIntoARunningMultiThreadedProcess) {
  TempDir dir("utramp-attach");
  const std::string marker = dir.path + "/marker";
  Target t(ATTACH_TARGET, 8, {"ATTACH_MARKER=" + marker});
  ASSERT_TRUE(t.ready());
  for (int i = 0; i < 10; ++i) {
    auto r = utramp::os::inject_library(t.pid(), ATTACH_MARKER_LIB);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_NE(r->handle, 0u) << r->error;
    EXPECT_GE(r->threads, 10u);  // main, 8 workers, the handler's
    ASSERT_TRUE(t.running());
    EXPECT_TRUE(no_tracer_left(t.pid()));
  }
  EXPECT_EQ(read_file(marker), fmt::format("loaded {}\n", t.pid()));  // one constructor run
  EXPECT_TRUE(maps_name(t.pid(), "attach_marker"));
  auto [out, code] = t.finish();
  EXPECT_EQ(out, kUntouched);
  EXPECT_EQ(code, 0);
}

// The loader's refusal comes back with its message (the target's dlerror()), and the
// process runs on.
TEST(Inject, ReportsTheLoadersMessage) {
  Target t(ATTACH_TARGET, 8);
  ASSERT_TRUE(t.ready());
  auto r = utramp::os::inject_library(t.pid(), "/nonexistent/libnothing.so");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->handle, 0u);
  EXPECT_NE(r->error.find("No such file"), std::string::npos) << r->error;
  EXPECT_TRUE(no_tracer_left(t.pid()));
  auto [out, code] = t.finish();
  EXPECT_EQ(out, kUntouched);
  EXPECT_EQ(code, 0);
}

// `utramp record -p`: a refusal says why, exits 2, and leaves the process as it was
// (still running, nothing of utramp mapped, no tracer, the same output at the end).
void expect_refused(Target& t, const std::vector<std::string>& args, const std::string& why) {
  auto r = run_cli(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  ASSERT_TRUE(t.running());
  EXPECT_FALSE(maps_name(t.pid(), "libutramp"));
  EXPECT_TRUE(no_tracer_left(t.pid()));
}

// Thread TID's SigBlk.
uint64_t sig_blocked(pid_t tid) {
  std::ifstream f(fmt::format("/proc/{}/status", tid));
  std::string line;
  while (std::getline(f, line))
    if (line.starts_with("SigBlk:")) return std::stoull(line.substr(7), nullptr, 16);
  return ~uint64_t{0};
}

// A forked child whose second thread blocks the signals of BLOCKS, says its id, and waits
// in read() for go(); it then exits 0 when its mask holds, of SIGTRAP and SIGUSR2, exactly
// those of EXPECT (10 otherwise): its system call went on and the change stayed.
class MaskedThreadChild {
 public:
  MaskedThreadChild(std::initializer_list<int> blocks, std::initializer_list<int> expect) {
    if (pipe2(ready_, O_CLOEXEC) != 0 || pipe2(go_, O_CLOEXEC) != 0) return;
    pid = fork();
    if (pid == 0) {
      std::atomic<pid_t> masked{0};
      std::thread t([&] {
        sigset_t s;
        sigemptyset(&s);
        for (int sig : blocks) sigaddset(&s, sig);
        pthread_sigmask(SIG_BLOCK, &s, nullptr);
        masked.store(gettid());
        char c;
        (void)!read(go_[0], &c, 1);  // blocked in read() while the mask is changed
        sigset_t now;
        pthread_sigmask(SIG_SETMASK, nullptr, &now);
        bool right = true;
        for (int sig : {SIGTRAP, SIGUSR2})
          right = right && (sigismember(&now, sig) == 1) == (std::find(expect.begin(), expect.end(), sig) != expect.end());
        _exit(right ? 0 : 10);
      });
      // The main thread says the id, not the new thread: glibc's pthread_create blocks every
      // signal in its caller until the clone returns, and a test reading the main thread's
      // mask before then would see SIGTRAP blocked there too.
      pid_t me = 0;
      while ((me = masked.load()) == 0) std::this_thread::yield();
      (void)!write(ready_[1], &me, sizeof me);
      t.join();
      _exit(12);
    }
    if (read(ready_[0], &tid, sizeof tid) != static_cast<ssize_t>(sizeof tid)) tid = 0;
  }
  ~MaskedThreadChild() {
    if (pid > 0 && !reaped_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    for (int fd : {ready_[0], ready_[1], go_[0], go_[1]}) close(fd);
  }
  // Lets the thread go on; its exit status (-1: not an exit).
  int go() {
    (void)!write(go_[1], "g", 1);
    int status = 0;
    reaped_ = waitpid(pid, &status, 0) == pid;
    return reaped_ && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  pid_t pid = -1, tid = 0;

 private:
  int ready_[2] = {-1, -1}, go_[2] = {-1, -1};
  bool reaped_ = false;
};

constexpr uint64_t kTrapBit = uint64_t{1} << (SIGTRAP - 1), kUsr2Bit = uint64_t{1} << (SIGUSR2 - 1);

// os::unblock_signal: a forked child whose second thread blocks SIGTRAP and SIGUSR2; only
// that thread is changed, only SIGTRAP leaves its mask, and the child runs on.
TEST(Inject, UnblocksASignalInTheThreadsAsked) {
  MaskedThreadChild child({SIGTRAP, SIGUSR2}, {SIGUSR2});
  ASSERT_GT(child.tid, 0);
  EXPECT_EQ(sig_blocked(child.tid) & (kTrapBit | kUsr2Bit), kTrapBit | kUsr2Bit);
  auto none = utramp::os::unblock_signal(child.pid, {child.pid}, SIGTRAP);  // the main thread does not block it
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_TRUE(none->empty());
  auto foreign = utramp::os::unblock_signal(child.pid, {getpid()}, SIGTRAP);
  ASSERT_FALSE(foreign);
  EXPECT_NE(foreign.error().message.find("is not a thread of process"), std::string::npos) << foreign.error().message;
  auto done = utramp::os::unblock_signal(child.pid, {child.tid}, SIGTRAP);
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(*done, std::vector<pid_t>{child.tid});
  EXPECT_EQ(sig_blocked(child.tid) & (kTrapBit | kUsr2Bit), kUsr2Bit);
  std::ifstream st(fmt::format("/proc/{}/status", child.tid));
  std::string all((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("TracerPid:\t0"), std::string::npos) << "no ptrace stays";
  EXPECT_EQ(child.go(), 0) << "its read() went on, and its mask is SIGUSR2 alone";
}

// os::block_signal, unblock_signal's reverse (a refused attach undoes the unblocking):
// SIGTRAP goes back into the mask of the thread asked, beside what it blocks itself, and
// a thread that blocks it already is left as it is.
TEST(Inject, BlocksASignalAgain) {
  MaskedThreadChild child({SIGUSR2}, {SIGTRAP, SIGUSR2});
  ASSERT_GT(child.tid, 0);
  EXPECT_EQ(sig_blocked(child.tid) & (kTrapBit | kUsr2Bit), kUsr2Bit);
  auto done = utramp::os::block_signal(child.pid, {child.tid}, SIGTRAP);
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(*done, std::vector<pid_t>{child.tid});
  EXPECT_EQ(sig_blocked(child.tid) & (kTrapBit | kUsr2Bit), kTrapBit | kUsr2Bit);
  auto again = utramp::os::block_signal(child.pid, {child.tid}, SIGTRAP);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_TRUE(again->empty()) << "it blocks SIGTRAP already";
  EXPECT_EQ(child.go(), 0) << "its read() went on, and its mask holds SIGTRAP and SIGUSR2";
}

TEST(RecordPid, NoSuchProcess) {
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  auto r = run_cli({"record", "-p", std::to_string(gone)});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(fmt::format("no process {}", gone)), std::string::npos) << r.err;
}

TEST(RecordPid, Zombie) {
  const pid_t z = fork();
  if (z == 0) _exit(0);
  // Not reaped: a zombie until waited for.
  for (int i = 0; i < 1000 && read_file(fmt::format("/proc/{}/stat", z)).find(") Z") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto r = run_cli({"record", "-p", std::to_string(z)});
  waitpid(z, nullptr, 0);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("is a zombie"), std::string::npos) << r.err;
}

TEST(RecordPid, AnotherTracer) {
  Target t(ATTACH_TARGET, 8);
  ASSERT_TRUE(t.ready());
  // This test is the other tracer (as gdb or strace would be).
  ASSERT_EQ(ptrace(PTRACE_SEIZE, t.pid(), nullptr, nullptr), 0) << strerror(errno);
  auto r = run_cli({"record", "-p", std::to_string(t.pid())});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(fmt::format("is already traced by process {}", getpid())), std::string::npos) << r.err;
  EXPECT_FALSE(maps_name(t.pid(), "libutramp"));
  // Let it go: interrupted, then detached (a running tracee cannot be detached).
  ASSERT_EQ(ptrace(PTRACE_INTERRUPT, t.pid(), nullptr, nullptr), 0);
  waitpid(t.pid(), nullptr, __WALL);
  ASSERT_EQ(ptrace(PTRACE_DETACH, t.pid(), nullptr, nullptr), 0);
  auto [out, code] = t.finish();
  EXPECT_EQ(out, kUntouched);
  EXPECT_EQ(code, 0);
}

TEST(RecordPid, Lockdown) {
  Target t(ATTACH_TARGET, 8, {"UTRAMP_LOCKDOWN=1"});
  ASSERT_TRUE(t.ready());
  expect_refused(t, {"record", "-p", std::to_string(t.pid())}, "started with UTRAMP_LOCKDOWN=1");
  auto [out, code] = t.finish();
  EXPECT_EQ(out, kUntouched);
}

TEST(RecordPid, StaticProgram) {
  Target t(ATTACH_STATIC, 8);
  ASSERT_TRUE(t.ready());
  expect_refused(t, {"record", "-p", std::to_string(t.pid())}, "is statically linked");
  auto [out, code] = t.finish();
  EXPECT_EQ(out, kUntouched);
}

TEST(RecordPid, AnotherUser) {
  if (auto why = utramp::test::no_second_user(); !why.empty()) GTEST_SKIP() << why;
  if (access(UTRAMP_CLI, X_OK) != 0) GTEST_SKIP() << "the CLI cannot be run";
  Target t(ATTACH_TARGET, 8);
  ASSERT_TRUE(t.ready());
  // The CLI run as nobody; its stderr through a pipe.
  int err[2];
  ASSERT_EQ(pipe(err), 0);
  const std::string pid = std::to_string(t.pid());
  const pid_t cli = fork();
  if (cli == 0) {
    dup2(err[1], 2);
    close(err[0]);
    if (setgroups(0, nullptr) != 0 || setresgid(utramp::test::kNobody, utramp::test::kNobody, utramp::test::kNobody) != 0 ||
        setresuid(utramp::test::kNobody, utramp::test::kNobody, utramp::test::kNobody) != 0)
      _exit(126);
    execl(UTRAMP_CLI, UTRAMP_CLI, "record", "-p", pid.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(err[1]);
  std::string text;
  char buf[512];
  ssize_t n;
  while ((n = read(err[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  close(err[0]);
  int st = 0;
  waitpid(cli, &st, 0);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 127) GTEST_SKIP() << "nobody cannot execute " << UTRAMP_CLI;
  EXPECT_EQ(WEXITSTATUS(st), 2) << text;
  EXPECT_NE(text.find(fmt::format("runs as uid 0 (effective 0), this utramp as uid {}", utramp::test::kNobody)),
            std::string::npos)
      << text;
  ASSERT_TRUE(t.running());
  EXPECT_FALSE(maps_name(t.pid(), "libutramp"));
  auto [out, code] = t.finish();
  EXPECT_EQ(out, kUntouched);
}

size_t thread_count(pid_t pid) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid))) {
    (void)e;
    ++n;
  }
  return n;
}

// Whether the bytes of every executable mapping of PID's program equal the file's.
bool text_as_in_file(pid_t pid, const std::string& program) {
  const std::string file = read_file(program);
  std::istringstream maps(read_file(fmt::format("/proc/{}/maps", pid)));
  const int mem = open(fmt::format("/proc/{}/mem", pid).c_str(), O_RDONLY | O_CLOEXEC);
  if (mem < 0) return false;
  size_t compared = 0;
  bool same = true;
  for (std::string line; std::getline(maps, line);) {
    unsigned long lo = 0, hi = 0, off = 0;
    char perms[8] = {};
    if (sscanf(line.c_str(), "%lx-%lx %7s %lx", &lo, &hi, perms, &off) != 4) continue;
    if (perms[2] != 'x' || !line.ends_with(std::filesystem::canonical(program).string())) continue;
    const size_t n = std::min<size_t>(hi - lo, file.size() - std::min<size_t>(off, file.size()));
    std::string live(n, '\0');
    if (pread(mem, live.data(), n, static_cast<off_t>(lo)) != static_cast<ssize_t>(n) ||
        live != file.substr(off, n))
      same = false;
    compared += n;
  }
  close(mem);
  return same && compared > 0;
}

// The agent loads into a running process: its initial-exec thread-local storage is a
// few pointers (the large per-thread blocks are mapped on first use), which fits in
// what glibc keeps for libraries loaded later. Loaded without the launcher's
// configuration it does nothing: no site patched (the program's code is the file's),
// no thread started; the blocked read and the signal handler carry on, and the results
// are an untouched run's. `record -p` says what it did and what is not there yet (the
// agent cannot be configured in a running process: docs/attach.md, "Status"). Twice:
// the second load finds the agent loaded.
// The agent loaded into a running process starts its control thread and nothing else;
// `record -p --duration` records it and detaches: the code is the file's again, the one
// thread added is the control thread (parked), and a second `record -p` reuses the agent
// already loaded (no second injection). The end-to-end counts, on programs with compiler
// sites: record_pid_test.cpp.
TEST(RecordPid, RecordsARunningProcessAndDetaches) {
  Target t(ATTACH_TARGET, 8);
  ASSERT_TRUE(t.ready());
  const size_t threads = thread_count(t.pid());
  for (int i = 0; i < 2; ++i) {
    TempDir dir("utramp-recpid");
    const std::string out = dir.path + "/rec";
    auto r = run_cli({"record", "-p", std::to_string(t.pid()), "--duration", "300ms", "-o", out});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find(fmt::format("the agent was loaded into process {}", t.pid())) != std::string::npos,
              i == 0)
        << r.err;
    EXPECT_NE(r.err.find(fmt::format("recording process {}", t.pid())), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(fmt::format("detached from process {}", t.pid())), std::string::npos) << r.err;
    ASSERT_TRUE(t.running());
    EXPECT_TRUE(no_tracer_left(t.pid()));
    EXPECT_TRUE(maps_name(t.pid(), "libutramp-agent.so"));
    // The trampolines' reclaimer (started when a function was traced) ends after a
    // second with nothing to reclaim.
    size_t now = thread_count(t.pid());
    for (int k = 0; k < 500 && now != threads + 1; ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      now = thread_count(t.pid());
    }
    EXPECT_EQ(now, threads + 1) << "the agent's threads: its control thread only";
    EXPECT_TRUE(text_as_in_file(t.pid(), ATTACH_TARGET)) << "the program's code is not the file's";
    // attach_target has no compiler sites: relocated prologues that replace several
    // instructions are never written while threads run; those functions get their
    // entry diverted by an int3 instead (docs/attach.md, "Limits"): all are traced,
    // and the recording is readable.
    EXPECT_EQ(r.err.find("not traced"), std::string::npos) << r.err;
    auto rep = run_cli({"report", out});
    EXPECT_EQ(rep.exit_code, 0) << rep.err;
  }
  auto [out, code] = t.finish();
  EXPECT_EQ(out, kUntouched);
  EXPECT_EQ(code, 0);
}

TEST(RecordPid, ProgramAndPidTogether) {
  auto r = run_cli({"record", "-p", "1", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("give no program as well"), std::string::npos) << r.err;
}

}  // namespace
