// Runs the utramp CLI (or any program) as a child and captures what it says.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

namespace utramp::test {

struct RunResult {
  int exit_code = -1;  // the exit status, or 128 + signal
  std::string out, err;
  bool timed_out = false;  // RunOptions::timeout_s expired: the child's group was killed
};

// How the child is started. The defaults are the plain case: stdin from /dev/null, the
// caller's working directory, core dumps as the environment says.
struct RunOptions {
  std::string stdin_path = "/dev/null";
  std::string cwd;        // empty: the caller's (a -pg target writes gmon.out there)
  bool no_core = false;   // RLIMIT_CORE 0, for a child that is meant to crash
  // > 0: the child runs in a process group of its own, which is killed (SIGKILL) after
  // this many seconds; the result then has timed_out set. For tests of hangs.
  int timeout_s = 0;
  int max_fds = 0;        // > 0: RLIMIT_NOFILE of the child (and what it starts)
};

// Runs argv[0] with argv (no shell) as OPTS say; reads stdout and stderr together so
// that neither pipe can fill up and block the child; reaps it. A child that cannot
// change to OPTS.cwd exits 126, one that cannot be executed 127.
inline RunResult run_program(const std::vector<std::string>& args, const RunOptions& opts = {}) {
  RunResult r;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return r;
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return r;
  }
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    if (opts.timeout_s > 0) setpgid(0, 0);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    const int in = open(opts.stdin_path.c_str(), O_RDONLY);
    if (in >= 0) dup2(in, STDIN_FILENO);
    if (opts.no_core) {
      const rlimit nocore{0, 0};
      setrlimit(RLIMIT_CORE, &nocore);
    }
    if (opts.max_fds > 0) {
      const rlimit fds{static_cast<rlim_t>(opts.max_fds), static_cast<rlim_t>(opts.max_fds)};
      setrlimit(RLIMIT_NOFILE, &fds);
    }
    if (!opts.cwd.empty() && chdir(opts.cwd.c_str()) != 0) _exit(126);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    close(out[0]);
    close(err[0]);
    return r;
  }
  if (opts.timeout_s > 0) setpgid(pid, pid);  // either side may run first
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  char buf[65536];
  timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (open_fds > 0) {
    int wait_ms = -1;
    if (opts.timeout_s > 0) {
      timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      const long spent = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
      if (spent >= opts.timeout_s * 1000L) {
        r.timed_out = true;
        kill(-pid, SIGKILL);  // the child and everything it started: its own group
        break;
      }
      wait_ms = static_cast<int>(opts.timeout_s * 1000L - spent);
    }
    const int ready = poll(fds, 2, wait_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (ready == 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      sinks[i]->append(buf, static_cast<size_t>(n));
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  return r;
}

inline RunResult run_cli(std::vector<std::string> args, const RunOptions& opts = {}) {
  args.insert(args.begin(), UTRAMP_CLI);
  return run_program(args, opts);
}

}  // namespace utramp::test
