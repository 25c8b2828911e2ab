// The long-running process of the attach tests (attach_counter.c) and the CLI attached to
// it in the background: shared by record_pid_test.cpp (`record -p`) and run_pid_test.cpp
// (`run -p`). COUNTER_TARGET_DIR: where the build put attach_counter's variants.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "child_io.hpp"
#include "cli_runner.hpp"
#include "text_vs_file.hpp"

namespace utramp::test {

inline std::string target_path(const std::string& variant) {
  return std::string(COUNTER_TARGET_DIR) + "/attach_counter_" + variant;
}

// attach_counter as a child on pipes, told what to do one letter at a time; with a
// LAUNCHER (`utramp record -o DIR --`, say), started by it.
class Counter {
 public:
  explicit Counter(const std::string& program, const char* extra = nullptr,
                   const std::vector<std::string>& launcher = {})
      : Counter(counter_argv(program, extra, launcher)) {}
  // Any program that speaks the protocol (its first line "ready PID"), started as ARGV.
  explicit Counter(const std::vector<std::string>& argv) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      std::vector<std::string> a = argv;
      std::vector<char*> p;
      for (auto& x : a) p.push_back(x.data());
      p.push_back(nullptr);
      execv(p[0], p.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    in_ = in[1];
    out_ = out[0];
    const std::string line = read_line(out_);
    ready_ = line.starts_with("ready ");
    target_ = ready_ ? std::atoi(line.c_str() + 6) : -1;
  }
  ~Counter() {
    if (target_ > 0 && target_ != pid_) kill(target_, SIGKILL);
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      reap_child(pid_);
    }
    if (in_ >= 0) close(in_);
    if (out_ >= 0) close(out_);
  }
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  pid_t pid() const { return target_; }  // the program's (not its launcher's)
  bool ready() const { return ready_; }
  // 'p': the workers wait; the calls of count_a and count_b made so far.
  std::pair<long, long> pause() {
    const std::string line = say('p');
    long a = -1, b = -1;
    if (sscanf(line.c_str(), "counts %ld %ld", &a, &b) != 2) return {-1, -1};
    return {a, b};
  }
  bool resume() { return say('r') == "resumed"; }
  // With the workers resumed: lets them run at least 50 ms and until both counts moved
  // past FROM, then pauses them; the counts then. The window's length is all the wait
  // changes: on a machine busy with other tests, eight resumed workers were once not
  // run at all within 50 ms. Gives up after about 5 s (the caller's check of the counts
  // then fails, as it would for workers that hang).
  std::pair<long, long> pause_once_moved(std::pair<long, long> from) {
    for (int step = 0;; ++step) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const auto now = pause();
      const bool moved = now.first > from.first && now.second > from.second;
      if (now.first < 0 || moved || step == 100 || !resume()) return now;
    }
  }
  // Any other letter the fixture knows (attach_counter.c): its one-line answer.
  std::string command(char c) { return say(c); }
  void exec() { (void)!write(in_, "x", 1); }
  std::pair<std::string, int> finish() {
    (void)!write(in_, "q", 1);
    close(in_);
    in_ = -1;
    const std::string rest = read_rest(out_);
    target_ = -1;
    const int code = reap_child(pid_);
    pid_ = -1;
    return {rest, code};
  }

 private:
  // attach_counter with 8 workers (and EXTRA), started by LAUNCHER if any.
  static std::vector<std::string> counter_argv(const std::string& program, const char* extra,
                                               const std::vector<std::string>& launcher) {
    std::vector<std::string> argv = launcher;
    argv.push_back(program);
    argv.push_back("8");
    if (extra) argv.push_back(extra);
    return argv;
  }
  std::string say(char c) {
    if (write(in_, &c, 1) != 1) return {};
    return read_line(out_);
  }
  pid_t pid_ = -1, target_ = -1;
  int in_ = -1, out_ = -1;
  bool ready_ = false;
};

// `utramp CMD [OBJECT] -p PID ARGS` in the background (`record -p`, `run -p`), its stderr
// in a file, its stdout in another (or /dev/null).
class AttachedCli {
 public:
  AttachedCli(const std::vector<std::string>& cmd, pid_t target, const std::vector<std::string>& args,
              const std::string& err_path, const std::string& out_path = "/dev/null")
      : err_(err_path) {
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      dup2(fd, 2);
      const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
      dup2(null, 0);
      const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      dup2(out, 1);
      std::vector<std::string> argv{UTRAMP_CLI};
      argv.insert(argv.end(), cmd.begin(), cmd.end());
      argv.push_back("-p");
      argv.push_back(std::to_string(target));
      argv.insert(argv.end(), args.begin(), args.end());
      std::vector<char*> p;
      for (auto& a : argv) p.push_back(a.data());
      p.push_back(nullptr);
      execv(p[0], p.data());
      _exit(127);
    }
  }
  ~AttachedCli() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      reap_child(pid_);
    }
  }
  AttachedCli(const AttachedCli&) = delete;
  AttachedCli& operator=(const AttachedCli&) = delete;
  pid_t pid() const { return pid_; }
  // Until it says it is attached ("Ctrl-C to stop": true) or it ended (false), 60 s at most.
  bool attached() {
    for (int i = 0; i < 6000; ++i) {
      if (errors().find("Ctrl-C to stop") != std::string::npos) return true;
      if (waitpid(pid_, nullptr, WNOHANG) != 0) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  int stop(int sig) {
    kill(pid_, sig);
    return reap_child(pid_);
  }
  int wait() { return reap_child(pid_); }
  std::string errors() const { return read_file(err_); }

 private:
  std::string err_;
  pid_t pid_ = -1;
};

// `utramp record -p PID ARGS` in the background.
class Recorder : public AttachedCli {
 public:
  Recorder(pid_t target, const std::vector<std::string>& args, const std::string& err_path)
      : AttachedCli({"record"}, target, args, err_path) {}
  bool recording() { return attached(); }
};

// The calls of FUNC in the recording DIR, from `utramp report` (-1: not listed).
inline long recorded_calls(const std::string& dir, const std::string& func) {
  auto r = run_cli({"report", dir});
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (w.size() >= 2 && w.back() == func) return std::stol(w[w.size() - 2]);
  }
  return -1;
}

inline // Waits up to 10 s for the process's .text to be its file's again.
TextDiff text_back(pid_t pid, const std::string& path) {
  TextDiff d;
  for (int i = 0; i < 1000; ++i) {
    d = text_vs_file(pid, path);
    if (d.read && d.bytes == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return d;
}

// The end of a test on C (attach_counter at TARGET, 8 workers) once utramp left it:
// its .text is the file's, and it ends with every result right.
inline void expect_left_as_untraced(Counter& c, const std::string& target) {
  EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
}

}  // namespace utramp::test
