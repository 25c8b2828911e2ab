// `utramp run OBJECT -p PID` end to end (docs/attach.md, "eBPF programs in a running
// process"): bpf/count_calls.bpf.o (an fentry program on count_a, a uprobe in count_b,
// counting their calls in an array map) run in attach_counter (8 workers counting their
// own calls, one thread blocked in read(), one in a signal handler) RUN_PID_CYCLES times
// in a row without a restart. In each cycle the workers are paused while the CLI
// attaches and while it detaches (record_pid_test's window), so the map must hold
// exactly the calls the program counted in between. After each detach the process's
// .text is its file's; at the end its results are right. Then: `show -p` while the
// programs run, the CLI killed, the process's exit, the refusals, and --metrics served
// from the running process; USDT probes with semaphores (bpf/count_usdt.bpf.o on
// attach_counter's own, examples/bpf/usdt_pycalls.bpf.o on Debian's python3). Clients
// side by side: clients_test.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bpf_runner.hpp"
#include "probe/sigtrap_mask.hpp"
#include "cli_runner.hpp"
#include "counter_fixture.hpp"
#include "prometheus.hpp"
#include "second_user.hpp"
#include "temp_dir.hpp"
#include "usdt_semaphores.hpp"

#ifndef RUN_PID_CYCLES
#define RUN_PID_CYCLES 10
#endif

namespace {

using nlohmann::json;
using utramp::test::AttachedCli;
using utramp::test::Counter;
using utramp::test::expect_left_as_untraced;
using utramp::test::read_file;
using utramp::test::run_cli;
using utramp::test::target_path;
using utramp::test::TempDir;
using utramp::test::text_back;
using utramp::test::text_vs_file;
using utramp::test::TextDiff;
using utramp::test::usdt_semaphores;

const std::string kObject = std::string(RUN_PID_BPF_DIR) + "/count_calls.bpf.o";

// `utramp run count_calls.bpf.o -p PID --json ARGS` in the background.
class Runner : public utramp::test::Runner {
 public:
  Runner(pid_t target, const std::string& out, const std::vector<std::string>& args = {})
      : utramp::test::Runner(kObject, target, out, args) {}
};

// CYCLES runs of the programs on attach_counter (run with MODE), each over a window whose
// calls are known exactly; the stderr of each in ERRS.
void count_exact_cycles(const char* mode, int cycles, std::vector<std::string>* errs) {
  const std::string target = target_path("clang_pfe");
  Counter c(target, mode);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-runpid");
  for (int cycle = 0; cycle < cycles; ++cycle) {
    SCOPED_TRACE(fmt::format("cycle {}", cycle));
    const auto [a0, b0] = c.pause();
    ASSERT_GE(a0, 0);
    Runner run(c.pid(), fmt::format("{}/run{}", dir.path, cycle));
    ASSERT_TRUE(run.attached()) << run.errors();
    EXPECT_GT(text_vs_file(c.pid(), target).bytes, 0u) << "nothing was patched";
    ASSERT_TRUE(c.resume());
    const auto [a1, b1] = c.pause_once_moved({a0, b0});
    ASSERT_GT(a1, a0);
    EXPECT_EQ(run.stop(SIGINT), 0) << run.errors();
    EXPECT_NE(run.errors().find("1 links and 1 probes removed"), std::string::npos) << run.errors();
    const TextDiff d = text_vs_file(c.pid(), target);
    ASSERT_TRUE(d.read);
    EXPECT_EQ(d.bytes, 0u) << "after the detach, .text differs from the file at" << d.where;
    EXPECT_EQ(run.counts(), std::make_pair(a1 - a0, b1 - b0));
    if (errs) errs->push_back(run.errors());
    ASSERT_TRUE(c.resume());
  }
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
}

TEST(RunPid, EveryCallOfTheAttachedWindowIsCounted) { count_exact_cycles(nullptr, RUN_PID_CYCLES, nullptr); }

// Workers that block every signal while they call the functions (liblzma's do): the CLI
// takes SIGTRAP out of their masks before the programs are attached (a patch batch's
// int3 reached with it blocked would end the process), and says so once.
TEST(RunPid, WorkersThatBlockEverySignalAreCounted) {
  std::vector<std::string> errs;
  count_exact_cycles("block-all", 2, &errs);
  ASSERT_FALSE(errs.empty());
  EXPECT_NE(errs[0].find("SIGTRAP unblocked in thread "), std::string::npos) << errs[0];
  if (errs.size() > 1) {
    EXPECT_EQ(errs[1].find("SIGTRAP unblocked"), std::string::npos) << errs[1];
  }
}

// attach_counter's 'u': the workers' passes through the guarded USDT probe
// attach_counter:tick so far, and its semaphore now ({-1, -1}: no such answer).
std::pair<long, long> ticks(Counter& c) {
  const std::string line = c.command('u');
  long t = -1, s = -1;
  if (sscanf(line.c_str(), "ticks %ld, semaphore %ld", &t, &s) != 2) ADD_FAILURE() << "attach_counter said: " << line;
  return {t, s};
}

// A USDT probe guarded by a semaphore, in a running process (issue 16): count_usdt.bpf.o
// (SEC("usdt/...") and BPF_USDT as libbpf writes them) on attach_counter:tick, which
// each worker passes once per iteration while the semaphore is raised. The semaphore is
// raised in the process's memory (the PIE's load bias) while the program is attached and
// back to 0 after each detach, so the guarded code runs exactly in the attached window:
// the map holds the window's iterations, each with a worker's arguments, and the workers'
// own count of passes grows by as much, and not at all once detached. gcc's and clang's
// builds (arguments in registers, in stack slots), with and without compiler sites.
TEST(RunPid, UsdtProbeWithASemaphore) {
  const std::string object = std::string(RUN_PID_BPF_DIR) + "/count_usdt.bpf.o";
  for (const char* variant : {"gcc_plain", "clang_plain", "gcc_pfe", "clang_pfe"}) {
    SCOPED_TRACE(variant);
    const std::string target = target_path(variant);
    Counter c(target);
    ASSERT_TRUE(c.ready());
    TempDir dir("utramp-runpid");
    EXPECT_EQ(ticks(c), std::make_pair(0L, 0L)) << "the guarded code ran untraced";
    for (int cycle = 0; cycle < 3; ++cycle) {
      SCOPED_TRACE(fmt::format("cycle {}", cycle));
      const long a0 = c.pause().first;
      const long t0 = ticks(c).first;
      utramp::test::Runner run(object, c.pid(), fmt::format("{}/usdt{}", dir.path, cycle));
      ASSERT_TRUE(run.attached()) << run.errors();
      EXPECT_EQ(ticks(c), std::make_pair(t0, 1L)) << "the semaphore is not raised (one site)";
      EXPECT_EQ(usdt_semaphores(c.pid(), target)["attach_counter:tick"], 1);
      ASSERT_TRUE(c.resume());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const long a1 = c.pause().first;
      ASSERT_GT(a1, a0);
      EXPECT_EQ(run.stop(SIGINT), 0) << run.errors();
      EXPECT_NE(run.errors().find("0 links and 1 probes removed"), std::string::npos) << run.errors();
      EXPECT_EQ(ticks(c), std::make_pair(t0 + (a1 - a0), 0L)) << "the window's passes, the semaphore lowered";
      EXPECT_EQ(usdt_semaphores(c.pid(), target)["attach_counter:tick"], 0);
      EXPECT_EQ(run.counts(), std::make_pair(a1 - a0, a1 - a0));
      const TextDiff d = text_vs_file(c.pid(), target);
      ASSERT_TRUE(d.read);
      EXPECT_EQ(d.bytes, 0u) << "after the detach, .text differs from the file at" << d.where;
      ASSERT_TRUE(c.resume());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_GT(c.pause().first, a1);
      EXPECT_EQ(ticks(c).first, t0 + (a1 - a0)) << "the guarded code ran after the detach";
      ASSERT_TRUE(c.resume());
    }
    auto [res, code] = c.finish();
    EXPECT_EQ(res, "ok: 8 workers\n");
    EXPECT_EQ(code, 0);
  }
}

// A script for Debian's python3 that speaks attach_counter's protocol: "ready PID", then
// 'c' makes 100 calls of plain() and advances 100 generators once, closing each
// (printing "did 100"), 'q' ends it ("ok").
const char* const kPyScript = R"(import os
def plain(x):
    return x + 1
def gen():
    yield 1
    yield 2
print("ready", os.getpid(), flush=True)
while True:
    c = os.read(0, 1)
    if c in (b"", b"q"):
        break
    if c == b"c":
        for i in range(100):
            plain(i)
            g = gen()
            next(g)
            g.close()
        print("did 100", flush=True)
print("ok", flush=True)
)";

// What usdt_pycalls.bpf.o's `calls` map (python function name -> count) held at the end
// of a run whose --json output is in OUT.
std::map<std::string, long> py_calls(const std::string& out) {
  std::map<std::string, long> calls;
  std::istringstream in(read_file(out));
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object() || j.value("name", "") != "calls") continue;
    for (const json& e : j.at("entries")) {
      const std::string hex = e.at("key").get<std::string>();  // char[32], NUL-padded
      std::string name;
      for (size_t i = 0; i + 1 < hex.size() && hex.compare(i, 2, "00") != 0; i += 2)
        name += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
      calls[name] = e.at("value").get<long>();
    }
  }
  return calls;
}

// Debian's python3 attached live (issue 16), a program nobody here wrote: its USDT probes
// sit in stripped .cold code (int3 probes) behind semaphores. CPython 3.11 fires
// python:function__entry for a call only from its tracing dispatch (CPython issue
// gh-98894), which it takes while sys.settrace/setprofile is set or python:line's
// semaphore is raised; otherwise only for a generator entered by throw() or close(). So
// usdt_pycalls.bpf.o on function__entry alone counts the generators closed and no plain
// call, launched or attached alike (python:function__return, beside it, every frame's
// exit); with a second client on python:line beside it, every call: plain() once, gen()
// at next() and at close(). Each count is exact (the script works only when told), every
// semaphore is back to 0 after each detach, .text is the file's, and everything the
// script printed is what it prints untraced.
TEST(RunPid, UsdtInDebiansPython) {
  const std::string py = "/usr/bin/python3";
  if (access(py.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << py;
  auto version = utramp::test::run_program({py, "-c", "import sys; print(sys.version_info[:2] == (3, 11))"});
  if (version.out != "True\n") GTEST_SKIP() << py << " is not CPython 3.11, whose probes this test counts";
  char* real = realpath(py.c_str(), nullptr);
  ASSERT_NE(real, nullptr);
  const std::string exe = real;
  free(real);
  {
    auto elf = utramp::os::ElfFile::open(exe);
    ASSERT_TRUE(elf);
    auto notes = utramp::ebpf::read_usdt_notes(**elf);
    ASSERT_TRUE(notes);
    if (std::none_of(notes->begin(), notes->end(), [](const auto& n) { return n.name == "function__entry"; }))
      GTEST_SKIP() << exe << " has no USDT probe python:function__entry";
  }
  const std::string object = std::string(BPF_EXAMPLES_DIR) + "/usdt_pycalls.bpf.o";
  const std::vector<std::string> argv{py, "-c", kPyScript};
  // Everything a script printed after its "ready" line, each 'c' answered as it came.
  std::string untraced_output, output;
  auto work = [](Counter& k, std::string& printed) { printed += k.command('c') + "\n"; };
  {
    Counter plain(argv);
    ASSERT_TRUE(plain.ready());
    for (int i = 0; i < 4; ++i) work(plain, untraced_output);
    untraced_output += plain.finish().first;
  }
  Counter c(argv);
  ASSERT_TRUE(c.ready());
  const std::map<std::string, uint16_t> untraced = usdt_semaphores(c.pid(), exe);
  ASSERT_EQ(untraced.count("python:line"), 1u);
  for (const auto& [probe, value] : untraced) EXPECT_EQ(value, 0) << probe;
  TempDir dir("utramp-runpid");
  auto on = [](const std::string& probe) {
    return std::vector<std::string>{"--attach", "py_entry=usdt:/usr/bin/python3:python:" + probe};
  };
  {
    utramp::test::Runner entry(object, c.pid(), dir.path + "/entry", on("function__entry"));
    ASSERT_TRUE(entry.attached()) << entry.errors();
    utramp::test::Runner ret(object, c.pid(), dir.path + "/return", on("function__return"));
    ASSERT_TRUE(ret.attached()) << ret.errors();
    EXPECT_EQ(usdt_semaphores(c.pid(), exe)["python:function__entry"], 1);
    EXPECT_EQ(usdt_semaphores(c.pid(), exe)["python:function__return"], 1);
    work(c, output);
    work(c, output);
    EXPECT_EQ(entry.stop(SIGINT), 0) << entry.errors();
    EXPECT_EQ(ret.stop(SIGINT), 0) << ret.errors();
    EXPECT_EQ(py_calls(dir.path + "/entry"), (std::map<std::string, long>{{"gen", 200}}));
    // Every way out of a frame is reported without python:line: plain()'s returns,
    // each generator's yield and its exit by close()'s GeneratorExit.
    EXPECT_EQ(py_calls(dir.path + "/return"), (std::map<std::string, long>{{"gen", 400}, {"plain", 200}}));
  }
  EXPECT_EQ(usdt_semaphores(c.pid(), exe), untraced);
  EXPECT_EQ(text_vs_file(c.pid(), exe).bytes, 0u);
  {
    utramp::test::Runner line(object, c.pid(), dir.path + "/line", on("line"));
    ASSERT_TRUE(line.attached()) << line.errors();
    utramp::test::Runner entry(object, c.pid(), dir.path + "/entry2", on("function__entry"));
    ASSERT_TRUE(entry.attached()) << entry.errors();
    auto both = untraced;
    both["python:line"] = both["python:function__entry"] = 1;
    EXPECT_EQ(usdt_semaphores(c.pid(), exe), both);
    work(c, output);
    EXPECT_EQ(entry.stop(SIGINT), 0) << entry.errors();
    EXPECT_EQ(line.stop(SIGINT), 0) << line.errors();
    EXPECT_EQ(py_calls(dir.path + "/entry2"), (std::map<std::string, long>{{"gen", 200}, {"plain", 100}}));
    const auto lines = py_calls(dir.path + "/line");  // the lines run, by function
    EXPECT_EQ(lines.count("plain") ? lines.at("plain") : -1, 100);
    EXPECT_EQ(lines.count("gen") ? lines.at("gen") : -1, 100);
  }
  EXPECT_EQ(usdt_semaphores(c.pid(), exe), untraced);
  const TextDiff d = text_vs_file(c.pid(), exe);
  ASSERT_TRUE(d.read);
  EXPECT_EQ(d.bytes, 0u) << "after the detach, .text differs from the file at" << d.where;
  work(c, output);
  auto [rest, code] = c.finish();
  output += rest;
  EXPECT_EQ(output, untraced_output);
  EXPECT_EQ(untraced_output, "did 100\ndid 100\ndid 100\ndid 100\nok\n");
  EXPECT_EQ(code, 0);
}

// A uprobe in the C library of a process whose other threads run is refused, nothing
// changed (docs/sites.md, "The C library while threads run").
TEST(RunPid, AProbeInTheCLibraryIsRefusedWhileThreadsRun) {
  const std::string target = target_path("clang_pfe");
  Counter c(target);
  ASSERT_TRUE(c.ready());
  auto r = run_cli({"run", std::string(BPF_EXAMPLES_DIR) + "/stackcount.bpf.o", "-p", std::to_string(c.pid()),
                    "--duration", "100ms"});
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("no probe in"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("libc.so.6 while other threads run"), std::string::npos) << r.err;
  expect_left_as_untraced(c, target);
}

// A refused attach leaves the signal masks as it found them: attach_counter's workers
// block every signal (block-all, as liblzma's do); `run -p` of a uprobe on libc's malloc
// takes SIGTRAP out of their masks before it configures the agent, the agent refuses (the
// C library is not patched while other threads run), and the CLI puts SIGTRAP back, in
// the same threads. Without that, the refusal said "nothing was changed" while every
// worker's mask had lost SIGTRAP.
TEST(RunPid, ARefusedAttachBlocksSigtrapAgain) {
  const std::string target = target_path("clang_pfe");
  Counter c(target, "block-all");
  ASSERT_TRUE(c.ready());
  auto blocking = [&] {
    std::vector<uint32_t> tids;
    auto b = utramp::probe::threads_blocking_sigtrap(c.pid());
    EXPECT_TRUE(b) << b.error().message;
    if (b)
      for (const auto& t : *b) tids.push_back(t.tid);
    std::sort(tids.begin(), tids.end());
    return tids;
  };
  std::vector<uint32_t> existed;  // the process's threads before the attach
  for (const auto& e : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", c.pid())))
    existed.push_back(static_cast<uint32_t>(std::stoul(e.path().filename().string())));
  const std::vector<uint32_t> before = blocking();
  ASSERT_FALSE(before.empty()) << "the workers do not block SIGTRAP";
  auto r = run_cli({"run", std::string(BPF_EXAMPLES_DIR) + "/stackcount.bpf.o", "-p", std::to_string(c.pid()),
                    "--duration", "100ms"});
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("SIGTRAP unblocked in thread"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("libc.so.6 while other threads run"), std::string::npos) << r.err;
  // Every thread it unblocked: the workers, and the agent's control thread when it had
  // started (it blocks every signal) before the CLI read the masks.
  std::smatch again;
  ASSERT_TRUE(std::regex_search(r.err, again, std::regex(R"(SIGTRAP blocked again in (\d+) of the (\d+) thread)")))
      << r.err;
  EXPECT_EQ(again[1], again[2]) << r.err;
  // The masks as they were: the threads that blocked SIGTRAP block it again, and any other
  // that does is one the attach made (the agent's).
  const std::vector<uint32_t> after = blocking();
  for (uint32_t tid : before)
    EXPECT_TRUE(std::binary_search(after.begin(), after.end(), tid)) << "thread " << tid << " no longer blocks SIGTRAP";
  for (uint32_t tid : after)
    if (!std::binary_search(before.begin(), before.end(), tid)) {
      EXPECT_EQ(std::find(existed.begin(), existed.end(), tid), existed.end())
          << "thread " << tid << " did not block SIGTRAP before the attach";
    }
  expect_left_as_untraced(c, target);
}

// `utramp show -p` while the programs run: each program with its type, target and
// attachments, and the object's map; with --metrics, run counts that grow.
TEST(RunPid, ShowListsTheProgramsAndMaps) {
  const std::string target = target_path("clang_pfe");
  Counter c(target);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-runpid");
  Runner run(c.pid(), dir.path + "/show", {"--metrics", "127.0.0.1:0"});
  ASSERT_TRUE(run.attached()) << run.errors();
  auto shown = run_cli({"show", "-p", std::to_string(c.pid()), "--json"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  const json j = json::parse(shown.out);
  EXPECT_EQ(j.at("agent").value("state", ""), "attached");
  const json& bpf = j.at("bpf");
  ASSERT_EQ(bpf.at("programs").size(), 2u) << bpf.dump();
  const json& a = bpf.at("programs")[0];
  EXPECT_EQ(a.value("name", ""), "on_count_a");
  EXPECT_EQ(a.value("type", ""), "fentry");
  EXPECT_EQ(a.value("target", ""), "count_a");
  EXPECT_EQ(a.value("attached", 0), 1);
  EXPECT_GT(a.value("run_cnt", uint64_t{0}), 0u);
  EXPECT_EQ(a.value("misses", uint64_t{1}), 0u);
  const json& b = bpf.at("programs")[1];
  EXPECT_EQ(b.value("type", ""), "uprobe");
  EXPECT_EQ(b.value("target", ""), "count_b+0x5");
  EXPECT_EQ(bpf.at("maps").size(), 1u);
  EXPECT_EQ(bpf.at("maps")[0].value("name", ""), "calls_total");
  EXPECT_EQ(bpf.value("probes", 0), 1);
  auto text = run_cli({"show", "-p", std::to_string(c.pid())});
  EXPECT_NE(text.out.find("2 eBPF programs (1 probes)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("map calls_total (array, 2 max entries)"), std::string::npos) << text.out;
  EXPECT_EQ(run.stop(SIGINT), 0) << run.errors();
  EXPECT_FALSE(json::parse(run_cli({"show", "-p", std::to_string(c.pid()), "--json"}).out).contains("bpf"));
  EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
  EXPECT_EQ(c.finish().first, "ok: 8 workers\n");
}

// The CLI killed with SIGKILL: the agent sees its connection end and takes every
// program away at once (the bound of record -p's test); the next run -p is taken.
TEST(RunPid, KilledRunLeavesNothingPatched) {
  const std::string target = target_path("clang_pfe");
  Counter c(target);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-runpid");
  {
    Runner run(c.pid(), dir.path + "/killed");
    ASSERT_TRUE(run.attached()) << run.errors();
    EXPECT_GT(text_vs_file(c.pid(), target).bytes, 0u) << "nothing was patched";
    const pid_t cli = run.pid();
    EXPECT_EQ(run.stop(SIGKILL), 128 + SIGKILL);
    // The scratch directory (the map file, the status) went once the programs were
    // attached: the killed CLI leaves nothing behind.
    const char* tmp = getenv("TMPDIR");
    for (const auto& e : std::filesystem::directory_iterator(tmp && *tmp ? tmp : "/tmp"))
      EXPECT_FALSE(e.path().filename().string().starts_with(fmt::format("utramp-run-{}-", cli))) << e.path();
    const TextDiff d = text_back(c.pid(), target);
    EXPECT_EQ(d.bytes, 0u) << ".text differs from the file at" << d.where;
  }
  // The scratch directory of the killed CLI (the map file) is gone once the programs
  // were attached; the show says nothing is attached.
  const json j = json::parse(run_cli({"show", "-p", std::to_string(c.pid()), "--json"}).out);
  EXPECT_EQ(j.at("agent").value("state", ""), "detached");
  EXPECT_FALSE(j.contains("bpf"));
  Runner again(c.pid(), dir.path + "/again", {"--duration", "200ms"});
  EXPECT_EQ(again.wait(), 0) << again.errors();
  EXPECT_NE(again.errors().find("--duration"), std::string::npos) << again.errors();
  EXPECT_GT(again.counts().first, 0);
  EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
  EXPECT_EQ(c.finish().first, "ok: 8 workers\n");
}

// `utramp detach -p` while the programs run: they stop and every site goes back at once;
// the run goes on until Ctrl-C and prints what the map held at the detach.
TEST(RunPid, DetachStopsThePrograms) {
  const std::string target = target_path("clang_pfe");
  Counter c(target);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-runpid");
  const auto [a0, b0] = c.pause();
  Runner run(c.pid(), dir.path + "/detached");
  ASSERT_TRUE(run.attached()) << run.errors();
  ASSERT_TRUE(c.resume());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto [a1, b1] = c.pause();
  auto det = run_cli({"detach", "-p", std::to_string(c.pid())});
  EXPECT_EQ(det.exit_code, 0) << det.err;
  EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
  ASSERT_TRUE(c.resume());  // calls the programs no longer see
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(run.stop(SIGINT), 0) << run.errors();
  EXPECT_EQ(run.counts(), std::make_pair(a1 - a0, b1 - b0));
  EXPECT_EQ(c.finish().first, "ok: 8 workers\n");
}

// The process ends while the programs run: the CLI says so and prints what the maps
// held.
TEST(RunPid, ProcessThatExitsEndsTheRun) {
  Counter c(target_path("clang_pfe"));
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-runpid");
  Runner run(c.pid(), dir.path + "/exits");
  ASSERT_TRUE(run.attached()) << run.errors();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(c.finish().first, "ok: 8 workers\n");
  EXPECT_EQ(run.wait(), 0) << run.errors();
  EXPECT_NE(run.errors().find("exited after"), std::string::npos) << run.errors();
  EXPECT_NE(run.errors().find("what was collected is kept"), std::string::npos) << run.errors();
  EXPECT_GT(run.counts().first, 0);
}

// What run -p refuses, each said, with the process left as it was.
TEST(RunPid, Refusals) {
  // gcc's five 1-byte NOPs cannot change while threads run (docs/attach.md, "Limits"):
  // the fentry program is refused, naming the function and why; nothing stays patched.
  const std::string gcc = target_path("gcc_pfe");
  Counter c(gcc);
  ASSERT_TRUE(c.ready());
  const std::string pid = std::to_string(c.pid());
  auto r = run_cli({"run", kObject, "-p", pid});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("refused the configuration: cannot attach on_count_a (fentry count_a)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("nothing was changed"), std::string::npos) << r.err;
  EXPECT_EQ(text_vs_file(c.pid(), gcc).bytes, 0u);
  // The same after a record -p, which diverts those entries by int3s while it records: its
  // int3 entries end with it (they used to stay on, and run -p then took them).
  {
    TempDir dir("utramp-runpid");
    AttachedCli rec({"record"}, c.pid(), {"-o", dir.path + "/rec", "-q"}, dir.path + "/rec.err");
    ASSERT_TRUE(rec.attached()) << rec.errors();
    EXPECT_EQ(rec.stop(SIGINT), 0) << rec.errors();
  }
  EXPECT_EQ(text_back(c.pid(), gcc).bytes, 0u);
  r = run_cli({"run", kObject, "-p", pid, "--duration", "1s"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("refused the configuration: cannot attach on_count_a (fentry count_a)"), std::string::npos)
      << r.err;
  EXPECT_EQ(text_back(c.pid(), gcc).bytes, 0u);
  // A program with -p, --duration without it, a process that does not exist.
  auto both = run_cli({"run", kObject, "-p", pid, "--", "/bin/true"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("give no program as well"), std::string::npos) << both.err;
  auto dur = run_cli({"run", kObject, "--duration", "1s", "--", "/bin/true"});
  EXPECT_EQ(dur.exit_code, 2);
  EXPECT_NE(dur.err.find("only with -p PID"), std::string::npos) << dur.err;
  auto none = run_cli({"run", kObject, "-p", "4194304"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("cannot attach"), std::string::npos) << none.err;
  EXPECT_EQ(c.finish().first, "ok: 8 workers\n");
}

// Another user (nobody) is refused before anything is read or loaded: the process has
// no agent after, and runs on.
TEST(RunPid, AnotherUserIsRefused) {
  if (const std::string why = utramp::test::no_second_user(); !why.empty()) GTEST_SKIP() << why;
  Counter c(target_path("clang_pfe"));
  ASSERT_TRUE(c.ready());
  int err[2];
  ASSERT_EQ(pipe2(err, O_CLOEXEC), 0);
  const std::string pid = std::to_string(c.pid());
  const bool ok = utramp::test::as_nobody([&] {
    dup2(err[1], 2);
    execl(UTRAMP_CLI, UTRAMP_CLI, "run", kObject.c_str(), "-p", pid.c_str(), static_cast<char*>(nullptr));
    return false;
  });
  close(err[1]);
  const std::string text = utramp::test::read_rest(err[0]);
  close(err[0]);
  EXPECT_FALSE(ok);
  EXPECT_NE(text.find(fmt::format("this utramp as uid {}", utramp::test::kNobody)), std::string::npos) << text;
  EXPECT_EQ(read_file(fmt::format("/proc/{}/maps", c.pid())).find("libutramp"), std::string::npos);
  EXPECT_EQ(c.finish().first, "ok: 8 workers\n");
}

// The attached window of the --metrics tests: `run -p --metrics 127.0.0.1:0` on a paused
// attach_counter, the workers let run 50 ms, then paused again (record_pid_test's
// window): the endpoint's port, and the calls of count_a and count_b in between.
class RunPidMetrics : public ::testing::Test {
 protected:
  void open_window() {
    ASSERT_TRUE(c.ready());
    const auto [a0, b0] = c.pause();
    run = std::make_unique<Runner>(c.pid(), dir.path + "/metrics",
                                   std::vector<std::string>{"--metrics", "127.0.0.1:0"});
    ASSERT_TRUE(run->attached()) << run->errors();
    std::smatch m;
    const std::string err = run->errors();
    ASSERT_TRUE(std::regex_search(err, m, std::regex("metrics at http://127\\.0\\.0\\.1:([0-9]+)/metrics"))) << err;
    port = std::stoi(m[1].str());
    ASSERT_TRUE(c.resume());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto [a1, b1] = c.pause();
    a = a1 - a0;
    b = b1 - b0;
  }
  // The run stopped: what it printed is the window's, .text is the file's, the process
  // ends well.
  void close_window() {
    EXPECT_EQ(run->stop(SIGINT), 0) << run->errors();
    EXPECT_EQ(run->counts(), std::make_pair(a, b));
    EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
    ASSERT_TRUE(c.resume());
    EXPECT_EQ(c.finish().first, "ok: 8 workers\n");
  }

  const std::string target = target_path("clang_pfe");
  Counter c{target};
  TempDir dir{"utramp-runpid"};
  std::unique_ptr<Runner> run;
  int port = -1;
  long a = -1, b = -1;
};

// --metrics from a running process (issue 15's "and later from attached processes"):
// scraped while the workers are paused, the map's count and the program's runs equal
// the calls the program counted since the attach.
TEST_F(RunPidMetrics, MetricsOfARunningProcess) {
  ASSERT_NO_FATAL_FAILURE(open_window());
  httplib::Client http("127.0.0.1", port);
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res) << "no answer from the endpoint";
  EXPECT_EQ(res->status, 200);
  for (const std::string& want :
       {fmt::format("utramp_map_calls_total{{key=\"0\"}} {}\n", a),
        fmt::format("utramp_map_calls_total{{key=\"1\"}} {}\n", b),
        fmt::format("utramp_prog_runs_total{{prog=\"on_count_a\",section=\"fentry/count_a\"}} {}\n", a)})
    EXPECT_NE(res->body.find(want), std::string::npos) << want << " not in\n" << res->body;
  close_window();
}

// The same endpoint scraped by Debian's real Prometheus server, as the launched case is
// (tests/ebpf/prom_e2e_test.cpp): while the workers are paused, the values its query API
// gives equal the calls the program counted since the attach.
TEST_F(RunPidMetrics, PrometheusScrapesARunningProcess) {
  if (access(utramp::test::kPrometheus, X_OK) != 0)
    GTEST_SKIP() << utramp::test::kPrometheus << " is not installed (Debian package prometheus)";
  ASSERT_NO_FATAL_FAILURE(open_window());
  utramp::test::PromServer prom(dir.path, port);
  ASSERT_TRUE(prom.started());
  const std::string why = prom.wait_for({{"up{job=\"utramp\"}", 1},
                                         {"utramp_map_calls_total{key=\"0\"}", double(a)},
                                         {"utramp_map_calls_total{key=\"1\"}", double(b)},
                                         {"utramp_prog_runs_total{prog=\"on_count_a\"}", double(a)},
                                         {"utramp_prog_runs_total{prog=\"on_count_b\"}", double(b)}},
                                        20);
  EXPECT_TRUE(why.empty()) << why;
  close_window();
}

}  // namespace
