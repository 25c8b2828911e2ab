// Detach once the process has begun to exit (docs/trampolines.md, "Detach at exit"):
// utramp's exit handler stops reclamation and keeps its lock; a detach that runs after
// it on the exiting thread (here: libutramp loaded by dlopen, then an atexit handler
// registered before that, or an ELF destructor) must neither take that lock again nor
// give up the guarantee that no run of the program remains. Each case is a fresh
// process (exit_detach/exit_detach_c.c), killed after 10 s. (Linked the usual way,
// libutramp registers its handler when it loads, before main's static objects and
// before _dl_fini, so their detaches run before it; dlopen is the order that reaches it.)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr const char* kProg = UTRAMP_EXIT_DETACH_PROG;
constexpr const char* kLib = UTRAMP_EXIT_DETACH_LIB;

struct Outcome {
  bool finished = false;
  int status = 0;
  std::string err;
};

Outcome run(std::vector<std::string> argv) {
  char path[] = "/tmp/utramp_exit_detach_XXXXXX";
  const int fd = mkstemp(path);
  Outcome out;
  if (fd < 0) return out;
  unlink(path);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  // libutramp's thread block is initial-exec TLS (16 KiB): a dlopen finds room for it
  // only in a static TLS surplus raised from glibc's default.
  std::string tunable = "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=1048576";
  std::vector<char*> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "GLIBC_TUNABLES=", 15) != 0) env.push_back(*e);
  env.push_back(tunable.data());
  env.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, 2);
    execve(args[0], args.data(), env.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  pid_t r = 0;
  while ((r = waitpid(pid, &out.status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (r == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &out.status, 0);
  }
  out.finished = r != 0;
  std::string buf(1 << 16, '\0');
  const ssize_t n = pread(fd, buf.data(), buf.size(), 0);
  out.err = buf.substr(0, n > 0 ? static_cast<size_t>(n) : 0);
  close(fd);
  return out;
}

void expect_clean_exit(std::vector<std::string> argv) {
  const Outcome o = run(argv);
  ASSERT_TRUE(o.finished) << "deadlock: still exiting after 10 s; stderr:\n" << o.err;
  ASSERT_TRUE(WIFEXITED(o.status)) << "status " << o.status << "; stderr:\n" << o.err;
  EXPECT_EQ(WEXITSTATUS(o.status), 0)
      << "2 attach, 3 detach failed, 4 the program ran after detach, 5 it never ran; stderr:\n"
      << o.err;
}

TEST(TrampExitDetach, AtexitHandler) { expect_clean_exit({kProg, kLib, "atexit"}); }

TEST(TrampExitDetach, AtexitHandlerWithAThreadAsleepInTheFunction) {
  expect_clean_exit({kProg, kLib, "atexit", "sleeper"});
}

TEST(TrampExitDetach, ElfDestructor) { expect_clean_exit({kProg, kLib, "dtor"}); }

TEST(TrampExitDetach, ElfDestructorWithAThreadAsleepInTheFunction) {
  expect_clean_exit({kProg, kLib, "dtor", "sleeper"});
}

}  // namespace
