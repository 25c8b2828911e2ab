// The one launcher of record, run and hist (tools/utramp/launch.hpp) and the CLI's own
// conduct: programs the agent cannot be loaded into are refused, never run untraced;
// scripts run under their interpreter; nothing is left in the temporary directory; a
// reader that goes away (`| head`) ends the CLI quietly with status 0.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli_runner.hpp"
#include "temp_dir.hpp"

namespace {

using utramp::test::RunResult;
using utramp::test::TempDir;

const std::string kStatic = UTRAMP_LAUNCH_DIR "/static_prog";
const std::string kHost = UTRAMP_LOADER_DIR "/ld_host";
const std::string kBpf = UTRAMP_BPF_EXAMPLES_DIR "/latency.bpf.o";

TEST(Launch, StaticProgramIsRefusedByEveryCommand) {
  TempDir t("utramp-launch");
  const std::vector<std::vector<std::string>> commands = {
      {"record", "-o", t.path + "/d", "--", kStatic},
      {"hist", "main", "--", kStatic},
      {"run", kBpf, "--", kStatic},
  };
  for (const auto& c : commands) {
    SCOPED_TRACE(c[0]);
    const RunResult r = utramp::test::run_cli(c, {.timeout_s = 60});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("statically linked"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("static program ran"), std::string::npos) << "ran untraced";
  }
}

// A set-user-ID program runs in the loader's secure mode, which drops LD_PRELOAD.
TEST(Launch, SetUserIdProgramIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a copy to another owner";
  TempDir t("utramp-launch");
  chmod(t.path.c_str(), 0755);
  const std::string copy = t.path + "/suid_host";
  std::filesystem::copy_file(kHost, copy);
  ASSERT_EQ(chown(copy.c_str(), 65534, 65534), 0);  // nobody
  ASSERT_EQ(chmod(copy.c_str(), 04755), 0);
  const RunResult r = utramp::test::run_cli({"record", "-o", t.path + "/d", "--", copy}, {.timeout_s = 60});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("set-user-ID"), std::string::npos) << r.err;
}

TEST(Launch, ScriptRunsUnderItsInterpreter) {
  TempDir t("utramp-launch");
  const std::string script = t.path + "/hello.sh";
  {
    std::ofstream f(script);
    f << "#!/bin/sh\necho \"hello from $0 $1\"\nexit 3\n";
  }
  chmod(script.c_str(), 0755);
  const RunResult plain = utramp::test::run_program({script, "x"});
  const RunResult r = utramp::test::run_cli({"record", "-o", t.path + "/d", "--", script, "x"}, {.timeout_s = 60});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.out, plain.out);
}

// A script started through env(1) (as pyenv's shims are): env only execs the
// interpreter, so without --follow-exec nothing of the script's work is traced; record
// says so, and not with --follow-exec.
TEST(Launch, ScriptThroughEnvSaysItsInterpreterIsNotFollowed) {
  if (access("/usr/bin/env", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/env";
  TempDir t("utramp-launch");
  const std::string script = t.path + "/hello.sh";
  {
    std::ofstream f(script);
    f << "#!/usr/bin/env sh\necho \"hello $1\"\n";
  }
  chmod(script.c_str(), 0755);
  const std::string note = "is a script started by /usr/bin/env, which only execs the interpreter it names";
  const RunResult r = utramp::test::run_cli({"record", "-o", t.path + "/d", "--", script, "x"}, {.timeout_s = 60});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "hello x\n");
  EXPECT_NE(r.err.find(note), std::string::npos) << r.err;
  const RunResult f = utramp::test::run_cli({"record", "--follow-exec", "-o", t.path + "/e", "--", script, "x"},
                                            {.timeout_s = 60});
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(f.out, "hello x\n");
  EXPECT_EQ(f.err.find(note), std::string::npos) << f.err;
}

// A distribution binary: stripped, no DWARF, no compiler sites.
TEST(Launch, StrippedDistributionBinaryRunsUnchanged) {
  TempDir t("utramp-launch");
  const RunResult plain = utramp::test::run_program({"/bin/echo", "a", "b"});
  const RunResult r = utramp::test::run_cli({"record", "-o", t.path + "/d", "--", "/bin/echo", "a", "b"},
                                            {.timeout_s = 60});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out);
}

// The "SigIgn:" and "SigBlk:" lines of the /proc/self/status cat printed into R.
std::string ignored_and_blocked(const RunResult& r) {
  std::string out;
  size_t pos = 0;
  for (size_t end; (end = r.out.find('\n', pos)) != std::string::npos; pos = end + 1) {
    const std::string line = r.out.substr(pos, end - pos);
    if (line.starts_with("SigIgn:") || line.starts_with("SigBlk:")) out += line + "\n";
  }
  return out;
}

// The program gets the signal dispositions and mask the CLI got: an ignored SIGINT or
// SIGQUIT (a command started with `nohup` or `&` by a shell without job control) stays
// ignored, though the CLI ignores both itself while it waits; SIGPIPE is the default (the
// CLI handles it, main.cpp); a blocked signal stays blocked.
TEST(Launch, ProgramGetsTheCallersSignalDispositionsAndMask) {
  TempDir t("utramp-launch");
  const std::vector<std::string> cat = {"/bin/cat", "/proc/self/status"};
  auto traced = [&](const std::string& dir) {
    std::vector<std::string> a = {"record", "-q", "-o", t.path + "/" + dir, "--"};
    a.insert(a.end(), cat.begin(), cat.end());
    return utramp::test::run_cli(a, {.timeout_s = 60});
  };
  const uint64_t pipe_bit = uint64_t{1} << (SIGPIPE - 1);
  auto without_sigpipe = [&](const std::string& lines) {
    // SigIgn: 16 hex digits.
    const size_t at = lines.find("SigIgn:");
    const uint64_t ign = std::stoull(lines.substr(at + 7, lines.find('\n', at) - at - 7), nullptr, 16);
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(ign & ~pipe_bit));
    return lines.substr(0, at) + "SigIgn:\t" + hex + lines.substr(lines.find('\n', at));
  };
  {
    SCOPED_TRACE("the defaults");
    const RunResult plain = utramp::test::run_program(cat);
    const RunResult r = traced("defaults");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(ignored_and_blocked(r), without_sigpipe(ignored_and_blocked(plain))) << r.out;
  }
  {
    SCOPED_TRACE("SIGINT, SIGQUIT and SIGPIPE ignored, SIGUSR1 blocked");
    struct sigaction ign {}, old_int {}, old_quit {}, old_pipe {};
    ign.sa_handler = SIG_IGN;
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGQUIT, &ign, &old_quit);
    sigaction(SIGPIPE, &ign, &old_pipe);
    sigset_t usr1, old_mask;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, &old_mask);
    const RunResult plain = utramp::test::run_program(cat);
    const RunResult r = traced("ignored");
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGQUIT, &old_quit, nullptr);
    sigaction(SIGPIPE, &old_pipe, nullptr);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string want = ignored_and_blocked(plain);
    ASSERT_NE(want.find("SigIgn:\t0000000000001006"), std::string::npos) << want;  // INT QUIT PIPE
    EXPECT_EQ(ignored_and_blocked(r), without_sigpipe(want)) << r.out;
  }
}

// The program gets the CLI's environment as it was, in its order, with LD_PRELOAD naming
// the agent first and then the user's own libraries, and UTRAMP_AGENT its configuration
// (as exec gave them: /proc/self/environ; the agent takes both out of what the program
// reads with getenv).
TEST(Launch, ProgramGetsTheEnvironmentWithTheUsersPreloadAfterTheAgent) {
  TempDir t("utramp-launch");
  const std::string lib = "/lib/x86_64-linux-gnu/libm.so.6";  // harmless to preload
  if (access(lib.c_str(), R_OK) != 0) GTEST_SKIP() << "no " << lib;
  const std::vector<std::string> cat = {"/bin/cat", "/proc/self/environ"};
  setenv("UTRAMP_TEST_MARK", "a b=c", 1);
  setenv("LD_PRELOAD", lib.c_str(), 1);
  const RunResult plain = utramp::test::run_program(cat);
  std::vector<std::string> a = {"record", "-q", "-o", t.path + "/d", "--"};
  a.insert(a.end(), cat.begin(), cat.end());
  const RunResult r = utramp::test::run_cli(a, {.timeout_s = 60});
  unsetenv("LD_PRELOAD");
  unsetenv("UTRAMP_TEST_MARK");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto vars = [](const std::string& environ) {
    std::vector<std::string> out;
    for (size_t pos = 0, end; (end = environ.find('\0', pos)) != std::string::npos; pos = end + 1)
      out.push_back(environ.substr(pos, end - pos));
    return out;
  };
  std::vector<std::string> want;
  for (const auto& v : vars(plain.out))
    if (!v.starts_with("LD_PRELOAD=")) want.push_back(v);
  ASSERT_NE(std::find(want.begin(), want.end(), "UTRAMP_TEST_MARK=a b=c"), want.end());
  std::vector<std::string> got = vars(r.out);
  ASSERT_EQ(got.size(), want.size() + 2) << r.out;
  // The agent's path is the build's or the installation's (launch.cpp, agent_library()).
  const std::string preload = got[got.size() - 2];
  EXPECT_TRUE(preload.starts_with("LD_PRELOAD=/")) << preload;
  EXPECT_TRUE(preload.ends_with("/libutramp-agent.so:" + lib)) << preload;
  EXPECT_EQ(got.back(), "UTRAMP_AGENT=" + std::filesystem::canonical(t.path + "/d").string() + "/agent.json");
  got.resize(got.size() - 2);
  EXPECT_EQ(got, want);
}

// A program that passed the checks but that exec refuses (here: open for writing,
// ETXTBSY) is reported by the CLI with exec's reason, exit 127, as a shell does.
TEST(Launch, ExecFailureIsReportedByTheCli) {
  TempDir t("utramp-launch");
  const std::string copy = t.path + "/busy_host";
  std::filesystem::copy_file(kHost, copy);
  ASSERT_EQ(chmod(copy.c_str(), 0755), 0);
  const int fd = open(copy.c_str(), O_WRONLY | O_CLOEXEC);  // ETXTBSY while it is open
  ASSERT_GE(fd, 0);
  const RunResult r = utramp::test::run_cli({"record", "-o", t.path + "/d", "--", copy}, {.timeout_s = 60});
  close(fd);
  EXPECT_EQ(r.exit_code, 127) << r.err;
  EXPECT_EQ(r.err, "utramp record: cannot execute " + copy + ": Text file busy\n");
  EXPECT_EQ(r.out, "");
}

bool empty_dir(const std::string& d) { return std::filesystem::is_empty(d); }

// run and hist keep their files in a directory of their own, removed at the end.
TEST(Launch, NothingLeftInTheTemporaryDirectory) {
  TempDir tmp("utramp-tmpdir");
  TempDir t("utramp-launch");
  setenv("TMPDIR", tmp.path.c_str(), 1);
  const RunResult h = utramp::test::run_cli({"hist", "ld_plug_leaf", "--libs", "--", kHost}, {.timeout_s = 120});
  const RunResult r = utramp::test::run_cli({"run", kBpf, "--", UTRAMP_BPF_TARGET, "1", "10"}, {.timeout_s = 120});
  const RunResult bad = utramp::test::run_cli({"run", kBpf, "--", kStatic}, {.timeout_s = 60});
  unsetenv("TMPDIR");
  EXPECT_EQ(h.exit_code, 0) << h.err;
  EXPECT_NE(h.out.find("30 calls of ld_plug_leaf"), std::string::npos) << h.out;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(empty_dir(tmp.path)) << "left in TMPDIR: " << std::filesystem::directory_iterator(tmp.path)->path();
}

// `utramp replay | head`: when the reader has gone, the CLI ends quietly, with 0.
TEST(Launch, ReaderGoneIsANormalEnd) {
  TempDir t("utramp-launch");
  const std::string dir = t.path + "/d";
  ASSERT_EQ(utramp::test::run_cli({"record", "-o", dir, "--", kHost}, {.timeout_s = 60}).exit_code, 0);
  for (const char* cmd : {"replay", "report"}) {
    SCOPED_TRACE(cmd);
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    close(p[0]);  // the reader is gone before the first write
    int errp[2];
    ASSERT_EQ(pipe(errp), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(p[1], STDOUT_FILENO);
      dup2(errp[1], STDERR_FILENO);
      execl(UTRAMP_CLI, UTRAMP_CLI, cmd, dir.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(p[1]);
    close(errp[1]);
    std::string err;
    char buf[4096];
    for (ssize_t n; (n = read(errp[0], buf, sizeof buf)) > 0;) err.append(buf, static_cast<size_t>(n));
    close(errp[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    EXPECT_TRUE(WIFEXITED(st)) << "killed by signal " << WTERMSIG(st);
    EXPECT_EQ(WEXITSTATUS(st), 0);
    EXPECT_EQ(err, "");
  }
}

// Values that used to become something else silently (a throwing conversion aborted
// the CLI; NaN, overflow and unknown forms became 0 or were dropped): refused with the
// forms that are valid, exit 2, the program not run.
TEST(BadInput, OptionValuesAreRefusedWithTheValidForms) {
  TempDir t("utramp-launch");
  const std::string ran = t.path + "/ran";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--tid", "abc"}, "--tid"},
      {{"--tid", "99999999999"}, "--tid"},
      {{"-t", "1e300s"}, "a number and one of ns"},
      {{"-t", "nanus"}, "a number and one of ns"},
      {{"-t", "10parsecs"}, "a number and one of ns"},
      {{"-A", "f@arg99"}, "N from 1 to 16"},
      {{"-A", "f@arg1/z"}, "F one of d i u x s c f"},
      {{"-A", "f@arg1,argx"}, "argN[/F]"},
      {{"-R", "f/q"}, "'q' is not a value format: d i u x s c f"},
      {{"-D", "-3"}, "--depth"},
  };
  for (const auto& [opts, want] : cases) {
    std::vector<std::string> a = {"record", "-o", t.path + "/d"};
    a.insert(a.end(), opts.begin(), opts.end());
    a.insert(a.end(), {"--", "/usr/bin/touch", ran});
    SCOPED_TRACE(opts[0] + " " + opts[1]);
    const RunResult r = utramp::test::run_cli(a, {.timeout_s = 60});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(ran)) << "the program ran";
  }
}

// What is not a regular file is refused by name, never opened for reading: a FIFO
// would block the CLI until someone writes to it, /dev/zero never ends.
TEST(BadInput, NonRegularFilesAreRefused) {
  TempDir t("utramp-launch");
  const std::string fifo = t.path + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"list", fifo}, "a FIFO"},
      {{"list", t.path}, "a directory"},
      {{"list", "/dev/zero"}, "a character device"},
      {{"run", fifo, "--", "/bin/true"}, "a FIFO"},
      {{"run", t.path, "--", "/bin/true"}, "a directory"},
      {{"run", "/dev/zero", "--", "/bin/true"}, "a character device"},
      {{"record", "-o", t.path + "/d", "--", fifo}, "not a regular file"},
  };
  for (const auto& [args, want] : cases) {
    SCOPED_TRACE(args[0] + " " + args[1]);
    const RunResult r = utramp::test::run_cli(args, {.timeout_s = 30});
    ASSERT_FALSE(r.timed_out) << "blocked";
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  }
}

}  // namespace
