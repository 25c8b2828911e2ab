// `utramp record -p PID` end to end (docs/attach.md): attach_counter (8 workers calling
// count_a and count_b in a loop and counting their calls, one thread blocked in read(),
// one inside a signal handler) is recorded, RECORD_PID_CYCLES times in a row without a
// restart. In each cycle the workers are paused (outside the counted functions) while
// the CLI attaches and while it detaches, so the calls of the attached window are known
// exactly: the recording must hold exactly those (--mode block: none lost). After each
// detach the process's .text is its file's; at the end its results are right. Then the
// ends of a recording other than Ctrl-C: the CLI killed, the process's exit or exec.
//
// Built by clang with -fpatchable-function-entry=5 (one 5-byte NOP: changed while the
// threads run), by gcc with it (five 1-byte NOPs: a thread may be between two, so only
// byte 0 changes, into an int3 that diverts the entry) and by both without any site at
// -O2 (relocated prologues: an int3 where the first instruction is shorter than a jump).
// Threads that keep SIGTRAP blocked get it unblocked by the CLI before anything is
// patched; one that blocks it again unseen has the recording refused, nothing changed.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "agent/config.hpp"
#include "agent/control_protocol.hpp"
#include "cli_runner.hpp"
#include "counter_fixture.hpp"
#include "temp_dir.hpp"
#include "text_vs_file.hpp"

#ifndef RECORD_PID_CYCLES
#define RECORD_PID_CYCLES 10
#endif

namespace {

using utramp::test::AttachedCli;
using utramp::test::Counter;
using utramp::test::expect_left_as_untraced;
using utramp::test::Recorder;
using utramp::test::recorded_calls;
using utramp::test::run_cli;
using utramp::test::target_path;
using utramp::test::text_back;
using utramp::test::TempDir;
using utramp::test::text_vs_file;
using utramp::test::TextDiff;

// Each build of the counter: its entries are patched (clang_pfe) or diverted by int3s
// (gcc_pfe: five 1-byte NOPs; gcc_plain, clang_plain: no compiler site).
class RecordPidBuilds : public ::testing::TestWithParam<std::string> {};

// CYCLES recordings of BUILD (run with MODE: attach_counter.c) in a row, each of a window
// whose calls are known exactly; the stderr of each in ERRS.
void record_exact_cycles(const std::string& build, const char* mode, int cycles, std::vector<std::string>* errs) {
  const std::string target = target_path(build);
  if (!std::filesystem::exists(target)) GTEST_SKIP() << target << " not built (no such compiler)";
  Counter c(target, mode);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-recpid");
  for (int cycle = 0; cycle < cycles; ++cycle) {
    SCOPED_TRACE(fmt::format("cycle {}", cycle));
    const std::string out = fmt::format("{}/rec{}", dir.path, cycle);
    const auto [a0, b0] = c.pause();
    ASSERT_GE(a0, 0);
    Recorder rec(c.pid(), {"-o", out, "--mode", "block", "-q"}, out + ".err");
    ASSERT_TRUE(rec.recording()) << rec.errors();
    ASSERT_TRUE(c.resume());
    const auto [a1, b1] = c.pause_once_moved({a0, b0});
    ASSERT_GT(a1, a0);
    EXPECT_EQ(rec.stop(SIGINT), 0) << rec.errors();
    // clang's NOPs were canonicalised and go back; the others were never changed but
    // for the int3s, which the detach removed.
    const std::regex back(build == "clang_pfe" ? "[1-9][0-9]* sites back to the file's bytes" : " 0 sites back");
    EXPECT_TRUE(std::regex_search(rec.errors(), back)) << rec.errors();
    // Every function is traced; in a build without sites, main's command switch may be
    // a jump table, whose prologue cannot be relocated: said, and only that one.
    const std::string err = rec.errors();
    if (errs) errs->push_back(err);
    const bool only_main = err.find("1 function of process") != std::string::npos &&
                           err.find("main: main: indirect jump") != std::string::npos;
    EXPECT_TRUE(err.find("not traced") == std::string::npos || (build.ends_with("plain") && only_main))
        << err;
    const TextDiff d = text_vs_file(c.pid(), target);
    ASSERT_TRUE(d.read);
    EXPECT_EQ(d.bytes, 0u) << "after the detach, .text differs from the file at" << d.where;
    EXPECT_EQ(recorded_calls(out, "count_a"), a1 - a0);
    EXPECT_EQ(recorded_calls(out, "count_b"), b1 - b0);
    ASSERT_TRUE(c.resume());
    // Only this cycle's recording is kept (the directory holds ~10 MB).
    std::filesystem::remove_all(out);
  }
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
}

TEST_P(RecordPidBuilds, EveryCallOfTheAttachedWindowIsRecorded) {
  record_exact_cycles(GetParam(), nullptr, RECORD_PID_CYCLES, nullptr);
}

// Workers that block every signal while they call the functions (liblzma's do): the
// first int3 of a patch batch one of them reached would end the process, and int3
// entries could not be used. The CLI takes SIGTRAP out of their masks (ptrace) before
// anything is patched and says so; every call of the window is recorded.
TEST_P(RecordPidBuilds, WorkersThatBlockEverySignalAreRecorded) {
  std::vector<std::string> errs;
  record_exact_cycles(GetParam(), "block-all", 2, &errs);
  ASSERT_FALSE(errs.empty());
  EXPECT_NE(errs[0].find("SIGTRAP unblocked in thread "), std::string::npos) << errs[0];
  if (errs.size() > 1) EXPECT_EQ(errs[1].find("SIGTRAP unblocked"), std::string::npos) << errs[1];
}

// Attach and detach while the workers call the functions (nothing paused): threads are
// inside the first instructions, the int3 handler or the stub at every change. The
// process never crashes, each recording has calls, .text is the file's after each
// detach, and the workers' results are right at the end.
TEST_P(RecordPidBuilds, AttachAndDetachWhileThreadsRun) {
  const std::string target = target_path(GetParam());
  if (!std::filesystem::exists(target)) GTEST_SKIP() << target << " not built (no such compiler)";
  Counter c(target);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-recpid");
  for (int cycle = 0; cycle < RECORD_PID_CYCLES / 2; ++cycle) {
    SCOPED_TRACE(fmt::format("cycle {}", cycle));
    const std::string out = fmt::format("{}/run{}", dir.path, cycle);
    auto r = run_cli({"record", "-p", std::to_string(c.pid()), "--duration", "100ms", "-q", "-o", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_GT(recorded_calls(out, "count_a"), 0) << r.err;
    const TextDiff d = text_vs_file(c.pid(), target);
    ASSERT_TRUE(d.read);
    EXPECT_EQ(d.bytes, 0u) << "after the detach, .text differs from the file at" << d.where;
    std::filesystem::remove_all(out);
  }
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
}

INSTANTIATE_TEST_SUITE_P(Builds, RecordPidBuilds,
                         ::testing::Values("clang_pfe", "gcc_pfe", "gcc_plain", "clang_plain"),
                         [](const auto& info) { return info.param; });

// The CLI killed with SIGKILL while it records: the agent sees its connection end and
// puts every site back at once (docs/attach.md: the bound is the control thread's
// wake-up, which the close causes; the test allows 10 s on a loaded machine). The
// agent then takes the next recording.
TEST(RecordPidCounts, KilledRecorderLeavesNothingPatched) {
  const std::string target = target_path("clang_pfe");
  Counter c(target);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-recpid");
  {
    Recorder rec(c.pid(), {"-o", dir.path + "/killed", "-q"}, dir.path + "/killed.err");
    ASSERT_TRUE(rec.recording()) << rec.errors();
    const TextDiff patched = text_vs_file(c.pid(), target);
    EXPECT_GT(patched.bytes, 0u) << "nothing was patched";
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(rec.stop(SIGKILL), 128 + SIGKILL);
    const TextDiff d = text_back(c.pid(), target);
    EXPECT_EQ(d.bytes, 0u) << ".text differs from the file at" << d.where;
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(ms, 10000);
    RecordProperty("restored_ms", static_cast<int>(ms));
  }
  // What was recorded until then is readable (the CLI's own state: "recording").
  EXPECT_EQ(run_cli({"info", dir.path + "/killed"}).exit_code, 0);
  auto again = run_cli({"record", "-p", std::to_string(c.pid()), "--duration", "200ms", "-o", dir.path + "/again"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_GT(recorded_calls(dir.path + "/again", "count_a"), 0);
  EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
}

// One recording at a time: a second `record -p` is refused before it makes anything,
// and the first goes on to its end.
TEST(RecordPidCounts, ASecondRecordingIsRefused) {
  const std::string target = target_path("clang_pfe");
  Counter c(target);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-recpid");
  Recorder rec(c.pid(), {"-o", dir.path + "/first"}, dir.path + "/first.err");
  ASSERT_TRUE(rec.recording()) << rec.errors();
  auto second = run_cli({"record", "-p", std::to_string(c.pid()), "-o", dir.path + "/second"});
  EXPECT_EQ(second.exit_code, 2);
  EXPECT_NE(second.err.find("a recording (utramp record -p) is already attached"), std::string::npos) << second.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/second"));
  EXPECT_EQ(rec.stop(SIGINT), 0) << rec.errors();
  EXPECT_GT(recorded_calls(dir.path + "/first", "count_a"), 0);
  EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
}

// The process ends while it is recorded: the CLI says so, keeps what was recorded and
// exits 0 by itself.
TEST(RecordPidCounts, ProcessThatExitsEndsTheRecording) {
  const std::string target = target_path("clang_pfe");
  Counter c(target);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-recpid");
  Recorder rec(c.pid(), {"-o", dir.path + "/exits"}, dir.path + "/exits.err");
  ASSERT_TRUE(rec.recording()) << rec.errors();
  const pid_t pid = c.pid();
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
  EXPECT_EQ(rec.wait(), 0) << rec.errors();
  EXPECT_NE(rec.errors().find(fmt::format("process {} exited after", pid)), std::string::npos) << rec.errors();
  EXPECT_NE(rec.errors().find("what was recorded is kept"), std::string::npos) << rec.errors();
  EXPECT_GT(recorded_calls(dir.path + "/exits", "count_a"), 0);
}

// The process execs while it is recorded: the new image has no agent (the channel is
// close-on-exec). The CLI says so, keeps what was recorded and exits 0.
TEST(RecordPidCounts, ProcessThatExecsEndsTheRecording) {
  const std::string target = target_path("clang_pfe");
  Counter c(target);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-recpid");
  Recorder rec(c.pid(), {"-o", dir.path + "/execs"}, dir.path + "/execs.err");
  ASSERT_TRUE(rec.recording()) << rec.errors();
  c.exec();
  EXPECT_EQ(rec.wait(), 0) << rec.errors();
  EXPECT_NE(rec.errors().find(fmt::format("process {} exec'd", c.pid())), std::string::npos) << rec.errors();
  EXPECT_GT(recorded_calls(dir.path + "/execs", "count_a"), 0);
  auto [res, code] = c.finish();  // /bin/sleep 1 ends by itself
  EXPECT_EQ(res, "");
  EXPECT_EQ(code, 0);
}

// `utramp hist FUNC -p PID` measures through the same path: a histogram of the calls
// of the window, then every site back; a second program with -p is refused.
TEST(RecordPidCounts, HistOfARunningProcess) {
  const std::string target = target_path("clang_pfe");
  Counter c(target);
  ASSERT_TRUE(c.ready());
  auto r = run_cli({"hist", "count_a", "-p", std::to_string(c.pid()), "--duration", "200ms"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("calls of count_a; target detached after"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nsecs"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" 0 calls of"), std::string::npos) << r.out;
  EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
  auto both = run_cli({"hist", "count_a", "-p", std::to_string(c.pid()), "--", target});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("give no program as well"), std::string::npos) << both.err;
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
}

// The answers of attach_counter to each command letter of COMMANDS, one line each.
std::vector<std::string> answers(Counter& c, std::string_view commands) {
  std::vector<std::string> out;
  for (char k : commands) out.push_back(c.command(k));
  return out;
}

// Whether the kernel holds a handler for SIGTRAP in process PID (SigCgt).
bool kernel_catches_sigtrap(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("SigCgt:")) return (std::stoull(line.substr(7), nullptr, 16) >> (SIGTRAP - 1)) & 1;
  return false;
}

// "forked PID: LINE" without the pid; the pid in *PID.
std::string forked_line(const std::string& line, pid_t* pid) {
  *pid = -1;
  if (sscanf(line.c_str(), "forked %d:", pid) != 1) return line;
  return line.substr(line.find(':'));
}

// The builds whose entries are diverted by an int3 in a running process.
class RecordPidInt3Builds : public ::testing::TestWithParam<std::string> {};

// The program's own SIGTRAP while its entries are diverted by int3s: it installs a
// handler, raises SIGTRAP, executes an int3 of its own, installs a one-shot handler with
// SIGUSR2 in its mask, reads back what it set (sigaction(SIGTRAP, NULL, &old)), blocks
// SIGTRAP and calls a function with an int3 entry (which the kernel would end the
// process for, were SIGTRAP blocked), reading its mask back; after the detach again. Every answer is the untraced run's (its handler's mask and flags
// honoured, its action read back as it set it, the default action back when the
// one-shot handler ran), the int3 entries all reach utramp (the calls of the window are
// all recorded), and after the detach the kernel holds the program's action again.
TEST_P(RecordPidInt3Builds, TheProgramsOwnSigtrapStaysItsOwn) {
  const std::string target = target_path(GetParam());
  if (!std::filesystem::exists(target)) GTEST_SKIP() << target << " not built (no such compiler)";
  constexpr std::string_view kWhile = "gtgTihgigb", kAfter = "gtgTigb";
  std::vector<std::string> while_untraced, after_untraced;
  {
    Counter u(target);
    ASSERT_TRUE(u.ready());
    while_untraced = answers(u, kWhile);
    EXPECT_FALSE(kernel_catches_sigtrap(u.pid()));
    after_untraced = answers(u, kAfter);
    auto [res, code] = u.finish();
    EXPECT_EQ(res, "ok: 8 workers\n");
  }
  EXPECT_EQ(while_untraced[8], "trap action default, flags siginfo resethand, mask with SIGUSR2");
  Counter c(target);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-recpid");
  const std::string out = dir.path + "/own";
  const auto [a0, b0] = c.pause();
  ASSERT_GE(a0, 0);
  Recorder rec(c.pid(), {"-o", out, "--mode", "block", "-q"}, out + ".err");
  ASSERT_TRUE(rec.recording()) << rec.errors();
  EXPECT_GT(text_vs_file(c.pid(), target).bytes, 0u) << "no int3 entry";
  ASSERT_TRUE(c.resume());
  EXPECT_EQ(answers(c, kWhile), while_untraced);
  const auto [a1, b1] = c.pause_once_moved({a0, b0});  // calls of both in the window
  ASSERT_GT(b1, b0);
  EXPECT_EQ(rec.stop(SIGINT), 0) << rec.errors();
  EXPECT_EQ(recorded_calls(out, "count_a"), a1 - a0);
  EXPECT_EQ(recorded_calls(out, "count_b"), b1 - b0);
  EXPECT_FALSE(kernel_catches_sigtrap(c.pid())) << "utramp's SIGTRAP handler was left in the process";
  EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
  ASSERT_TRUE(c.resume());
  EXPECT_EQ(answers(c, kAfter), after_untraced);
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
}

// The program forks while it is recorded: the child has no recorder (nor control
// channel), so it runs as untraced: the file's bytes at every site, its signal actions
// and masks its own, its calls not in the parent's recording, its output and exit
// code the untraced child's.
TEST_P(RecordPidInt3Builds, AForkedChildRunsAsUntraced) {
  const std::string target = target_path(GetParam());
  if (!std::filesystem::exists(target)) GTEST_SKIP() << target << " not built (no such compiler)";
  pid_t child = -1;
  std::string untraced_line, untraced_exit;
  {
    Counter u(target);
    ASSERT_TRUE(u.ready());
    EXPECT_EQ(u.command('s'), "usr2 handled, mask with SIGTRAP");
    untraced_line = forked_line(u.command('f'), &child);
    ASSERT_GT(child, 0);
    untraced_exit = u.command('F');
    (void)u.finish();
  }
  EXPECT_EQ(untraced_exit, "child exit 7");
  Counter c(target);
  ASSERT_TRUE(c.ready());
  EXPECT_EQ(c.command('s'), "usr2 handled, mask with SIGTRAP");  // a mask utramp changes in the parent
  TempDir dir("utramp-recpid");
  const std::string out = dir.path + "/fork";
  const auto [a0, b0] = c.pause();
  Recorder rec(c.pid(), {"-o", out, "--mode", "block", "-q"}, out + ".err");
  ASSERT_TRUE(rec.recording()) << rec.errors();
  ASSERT_TRUE(c.resume());
  EXPECT_EQ(forked_line(c.command('f'), &child), untraced_line);
  ASSERT_GT(child, 0);
  const TextDiff d = text_vs_file(child, target);
  ASSERT_TRUE(d.read);
  EXPECT_EQ(d.bytes, 0u) << "the child's .text differs from the file at" << d.where;
  EXPECT_GT(text_vs_file(c.pid(), target).bytes, 0u) << "the parent is no longer recorded";
  EXPECT_FALSE(kernel_catches_sigtrap(child)) << "utramp's SIGTRAP handler is in the child";
  EXPECT_EQ(c.command('F'), untraced_exit);
  const auto [a1, b1] = c.pause_once_moved({a0, b0});  // calls in the window
  ASSERT_GT(a1, a0);
  EXPECT_EQ(rec.stop(SIGINT), 0) << rec.errors();
  EXPECT_EQ(recorded_calls(out, "count_a"), a1 - a0) << "the child's calls are not the parent's";
  EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
  ASSERT_TRUE(c.resume());
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
}

INSTANTIATE_TEST_SUITE_P(Builds, RecordPidInt3Builds, ::testing::Values("gcc_pfe", "gcc_plain", "clang_plain"),
                         [](const auto& info) { return info.param; });

// A recording whose entries all take a jump (clang's 5-byte NOPs; --only leaves out
// no_site, which has no site) uses no int3 entry: the program's handlers and signal
// functions are not touched (a handler with every signal in its mask keeps SIGTRAP in
// it), and the agent says nothing of taking them over.
TEST(RecordPidCounts, NoInt3EntryLeavesTheHandlersAlone) {
  const std::string target = target_path("clang_pfe");
  Counter c(target);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-recpid");
  const std::string out = dir.path + "/jumps";
  Recorder rec(c.pid(), {"-o", out, "-q", "--only", "count_*"}, out + ".err");
  ASSERT_TRUE(rec.recording()) << rec.errors();
  EXPECT_EQ(c.command('s'), "usr2 handled, mask with SIGTRAP");
  EXPECT_EQ(c.command('g'), "trap action default, flags, mask without SIGUSR2");
  // At once: a Ctrl-C right after the CLI says it records detaches (it killed the CLI
  // before its SIGINT handler was installed at the attach).
  EXPECT_EQ(rec.stop(SIGINT), 0) << rec.errors();
  std::ifstream log(fmt::format("{}/agent-{}.log", out, c.pid()));
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("traced 2 functions"), std::string::npos) << text;
  EXPECT_EQ(text.find("go through utramp"), std::string::npos) << text;
  EXPECT_EQ(text.find("no longer blocks SIGTRAP"), std::string::npos) << text;
  EXPECT_FALSE(kernel_catches_sigtrap(c.pid()));
  EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
}

// A handler installed with every signal in its mask calls a function with an int3
// entry: SIGTRAP would be blocked there, and the kernel would end the process. While
// the process is recorded the kernel's mask leaves SIGTRAP out (the call is recorded)
// and the program reads back the mask it set; after the detach the kernel's mask is the
// program's again.
TEST(RecordPidCounts, AHandlerThatBlocksEverySignalCallsATracedFunction) {
  const std::string target = target_path("gcc_pfe");
  Counter c(target);
  ASSERT_TRUE(c.ready());
  EXPECT_EQ(c.command('s'), "usr2 handled, mask with SIGTRAP");
  TempDir dir("utramp-recpid");
  const std::string out = dir.path + "/usr2";
  Recorder rec(c.pid(), {"-o", out, "-q"}, out + ".err");
  ASSERT_TRUE(rec.recording()) << rec.errors();
  EXPECT_EQ(c.command('s'), "usr2 handled, mask with SIGTRAP");
  EXPECT_EQ(rec.stop(SIGINT), 0) << rec.errors();
  EXPECT_EQ(recorded_calls(out, "no_site"), 1);
  EXPECT_EQ(c.command('s'), "usr2 handled, mask with SIGTRAP");
  EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
}

// gcc's -fpatchable-function-entry=5 is five 1-byte NOPs: a thread may be stopped
// between two of them, so only an int3 over the first can divert the entry while the
// threads run. With a thread that keeps SIGTRAP blocked that int3 would end the process
// when the thread reached it: no int3 is used, and the CLI says how many functions are
// not traced and why, naming the thread; nothing is changed.
// A thread that keeps SIGTRAP blocked (pthread_sigmask) would be ended with the process
// by the kernel at the first int3 it reached: the CLI takes SIGTRAP out of its mask
// before the agent patches anything, and int3 entries are used as usual.
TEST(RecordPidCounts, AThreadThatBlocksSigtrapGetsItUnblocked) {
  const std::string target = target_path("gcc_pfe");
  Counter c(target, "block-trap");
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-recpid");
  auto r = run_cli({"record", "-p", std::to_string(c.pid()), "--duration", "200ms", "-o", dir.path + "/gcc"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("SIGTRAP unblocked in thread "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("not traced"), std::string::npos) << r.err;
  EXPECT_GT(recorded_calls(dir.path + "/gcc", "count_a"), 0);
  expect_left_as_untraced(c, target);
}

// A thread that blocks SIGTRAP again by the raw system call (every millisecond), which
// nothing of utramp's sees: a configuration that reaches the agent while it keeps it
// blocked is refused, nothing patched, and the process runs on. The first recording
// loads the agent (the CLI unblocks the thread, which blocks it again at once: whether
// the agent sees that in time or not, the thread reaches no patched code); the second
// configuration is sent as the CLI sends it, without the CLI's unblocking before it.
TEST(RecordPidCounts, AThreadThatBlocksSigtrapAgainIsRefused) {
  const std::string target = target_path("clang_pfe");
  Counter c(target, "reblock-trap");
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-recpid");
  auto r = run_cli({"record", "-p", std::to_string(c.pid()), "--duration", "50ms", "-q", "-o", dir.path + "/first"});
  EXPECT_NE(r.err.find("SIGTRAP unblocked in thread "), std::string::npos) << r.err;
  EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // blocked again by then
  utramp::agent::Config cfg;
  const std::string second = dir.path + "/second";
  std::filesystem::create_directory(second);
  std::filesystem::permissions(second, std::filesystem::perms::owner_all);
  cfg.trace_dir = second;
  cfg.shm_path = second + "/buffers";
  auto answer = utramp::agent::control::call(
      c.pid(),
      {utramp::agent::control::MsgType::apply_config, {{"config", nlohmann::json::parse(utramp::agent::dump_config(cfg))}}},
      10000);
  ASSERT_FALSE(answer) << answer->dump();
  EXPECT_NE(answer.error().message.find("keeps SIGTRAP blocked: a thread that reaches"), std::string::npos)
      << answer.error().message;
  EXPECT_NE(answer.error().message.find("nothing was changed"), std::string::npos) << answer.error().message;
  expect_left_as_untraced(c, target);
}

// The C library while threads start, end and posix_spawn (attach_counter's churn
// thread): glibc runs its own functions with every signal blocked there, so a batch's
// int3 in one of them would end the process. `record -p --libs` leaves the C library
// out (said in the agent's log, counted as not traced), traces the rest, and the
// process runs on with every result right (it was ended by SIGTRAP before, in an ending
// thread's getpagesize under the attach's batch).
TEST(RecordPidCounts, TheCLibraryIsNotPatchedWhileThreadsRun) {
  const std::string target = target_path("clang_pfe");
  Counter c(target, "churn");
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-recpid");
  for (int cycle = 0; cycle < 3; ++cycle) {
    SCOPED_TRACE(fmt::format("cycle {}", cycle));
    const std::string out = fmt::format("{}/libs{}", dir.path, cycle);
    auto r = run_cli({"record", "-p", std::to_string(c.pid()), "--libs", "--duration", "200ms", "-o", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("not traced"), std::string::npos) << r.err;
    std::string log;
    for (const auto& e : std::filesystem::directory_iterator(out))
      if (e.path().filename().string().starts_with("agent-")) log += utramp::test::read_file(e.path().string());
    EXPECT_NE(log.find("libc.so.6 while other threads run"), std::string::npos) << log.substr(0, 2000);
    EXPECT_GT(recorded_calls(out, "count_a"), 0);
    EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
    std::filesystem::remove_all(out);
  }
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
}

}  // namespace
