// Clients side by side on one attached process (docs/attach.md, "Clients side by side"):
// a `record -p` and a `run -p`, two `run -p` with the same program on the same function,
// a `run -p` on a process started under `utramp record`, each client's end (Ctrl-C, or
// its CLI killed with SIGKILL) removing only what it made. attach_counter's 8 workers
// are paused while a client attaches or detaches, so each client's counts are exactly
// the calls the program made in its window; .text equals the file's once every client
// is gone. Built by clang (one 5-byte NOP: count_calls.bpf.o's fentry program and a
// uprobe) and by gcc (five 1-byte NOPs: a recording diverts the entries by int3s, and
// count_probes.bpf.o counts with uprobes past them). CLIENTS_CYCLES: the stress test's
// clients coming and going while the workers run.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bpf_runner.hpp"
#include "cli_runner.hpp"
#include "counter_fixture.hpp"
#define UTRAMP_GOLDEN_DIR "tests/attach/golden"
#include "golden.hpp"
#include "temp_dir.hpp"

#ifndef CLIENTS_CYCLES
#define CLIENTS_CYCLES 0
#endif

namespace {

using nlohmann::json;
using namespace utramp::test;  // the attach tests' fixtures

using Counts = std::pair<long, long>;
Counts minus(Counts a, Counts b) { return {a.first - b.first, a.second - b.second}; }

// The object that counts count_a's and count_b's calls in BUILD.
std::string object_for(const std::string& build) {
  return std::string(RUN_PID_BPF_DIR) + (build == "clang_pfe" ? "/count_calls.bpf.o" : "/count_probes.bpf.o");
}

json show(pid_t pid) {
  auto r = run_cli({"show", "-p", std::to_string(pid), "--json"});
  return r.exit_code == 0 ? json::parse(r.out, nullptr, false) : json{{"failed", r.err}};
}

// The eBPF programs show -p lists, each client's.
size_t programs_shown(const json& j) {
  return j.contains("bpf") ? j["bpf"].value("programs", json::array()).size() : 0;
}

// show -p once WANTED holds for it, or after 10 s; whether it held.
bool show_becomes(pid_t pid, const std::function<bool(const json&)>& wanted, json* last = nullptr) {
  json j;
  for (int i = 0; i < 200; ++i) {
    j = show(pid);
    if (wanted(j)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const bool held = wanted(j);
  if (last) *last = std::move(j);
  return held;
}
bool programs_become(pid_t pid, size_t n) {
  return show_becomes(pid, [n](const json& j) { return programs_shown(j) == n; });
}
bool recording_ends(pid_t pid) {
  return show_becomes(pid, [](const json& j) { return !j["agent"].value("recording", true); });
}
// What gone clients' programs used is freed after the grace period.
void expect_all_released(pid_t pid) {
  json j;
  EXPECT_TRUE(show_becomes(pid, [](const json& x) { return x.value("awaiting_release", 1) == 0; }, &j))
      << j.dump(2);
}

// Lets the paused workers run a little, then pauses them: the counts so far.
Counts run_a_while(Counter& c) {
  if (!c.resume()) return {-1, -1};
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return c.pause();
}

// The process's address space (VmSize of /proc/PID/status), in KiB.
long vm_size_kib(pid_t pid) {
  std::istringstream in(read_file(fmt::format("/proc/{}/status", pid)));
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("VmSize:")) return std::stol(line.substr(7));
  return -1;
}

// attach_counter of BUILD running (c), the object that counts its calls, a directory.
class ClientsOn {
 protected:
  void start(const std::string& build) {
    target = target_path(build);
    if (!std::filesystem::exists(target)) GTEST_SKIP() << target << " not built (no such compiler)";
    object = object_for(build);
    c = std::make_unique<Counter>(target);
    ASSERT_TRUE(c->ready());
  }
  // .text is the file's, and the program ends with its results right.
  void expect_untouched_end() {
    const TextDiff d = text_back(c->pid(), target);
    EXPECT_EQ(d.bytes, 0u) << "with every client gone, .text differs from the file at" << d.where;
    auto [res, code] = c->finish();
    EXPECT_EQ(res, "ok: 8 workers\n");
    EXPECT_EQ(code, 0);
  }
  std::string target, object;
  std::unique_ptr<Counter> c;
  TempDir dir{"utramp-clients"};
};

class Clients : public ClientsOn, public ::testing::Test {
 protected:
  void SetUp() override { start("clang_pfe"); }
};

class ClientsGcc : public ClientsOn, public ::testing::Test {
 protected:
  void SetUp() override { start("gcc_pfe"); }
};

class ClientsBuilds : public ClientsOn, public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { start(GetParam()); }
};

// The workers of C paused (their counts so far in p0), then a `record -p` (into
// DIR/recTAG, no event lost) and a `run -p` of OBJECT (DIR/runTAG) attached, one after
// the other.
struct RecordAndRun {
  RecordAndRun(Counter& c, const std::string& object, const std::string& dir, const std::string& tag)
      : p0(c.pause()), out(dir + "/rec" + tag), rec(c.pid(), {"-o", out, "--mode", "block", "-q"}, out + ".err") {
    if (p0.first >= 0 && rec.recording()) run = std::make_unique<Runner>(object, c.pid(), dir + "/run" + tag);
  }
  bool attached() { return run && run->attached(); }
  std::string errors() const { return rec.errors() + (run ? run->errors() : std::string()); }
  // Ctrl-C to the recording (or to the run): it holds exactly the calls of WINDOW.
  void stop_and_expect(bool recording, Counts window) {
    if (recording) {
      EXPECT_EQ(rec.stop(SIGINT), 0) << errors();
      EXPECT_EQ(recorded_calls(out, "count_a"), window.first);
      EXPECT_EQ(recorded_calls(out, "count_b"), window.second);
    } else {
      EXPECT_EQ(run->stop(SIGINT), 0) << errors();
      EXPECT_EQ(run->counts(), window);
    }
  }
  Counts p0;
  std::string out;
  Recorder rec;
  std::unique_ptr<Runner> run;
};

// A recording and eBPF programs at once, each ending first in turn: each gets exactly the
// calls of its own window, the one left goes on alone, and once both are gone .text is
// the file's.
TEST_P(ClientsBuilds, RecordAndRunSideBySide) {
  for (const bool run_ends_first : {true, false}) {
    SCOPED_TRACE(run_ends_first ? "the run ends first" : "the recording ends first");
    RecordAndRun both(*c, object, dir.path, run_ends_first ? "a" : "b");
    ASSERT_TRUE(both.attached()) << both.errors();
    const Counts p0 = both.p0;
    // show -p: both clients, each with what it made.
    const json j = show(c->pid());
    size_t recording = 0, programs = 0;
    for (const json& cl : j.value("clients", json::array())) {
      if (!cl.value("recording", std::string()).empty()) ++recording;
      if (!cl.value("bpf_objects", json::array()).empty()) ++programs;
    }
    EXPECT_EQ(recording, 1u) << j.dump(2);
    EXPECT_EQ(programs, 1u) << j.dump(2);
    const Counts p1 = run_a_while(*c);
    ASSERT_GT(p1.first, p0.first);
    both.stop_and_expect(!run_ends_first, minus(p1, p0));
    if (run_ends_first)
      EXPECT_GT(text_vs_file(c->pid(), target).bytes, 0u) << "the recording's sites went with the run";
    else
      EXPECT_EQ(programs_shown(show(c->pid())), 2u) << "the run's programs went with the recording";
    // The one left goes on alone.
    both.stop_and_expect(run_ends_first, minus(run_a_while(*c), p0));
    const TextDiff d = text_vs_file(c->pid(), target);
    ASSERT_TRUE(d.read);
    EXPECT_EQ(d.bytes, 0u) << "with both gone, .text differs from the file at" << d.where;
    ASSERT_TRUE(c->resume());
  }
  expect_untouched_end();
}

// One client's CLI killed with SIGKILL: the agent removes what it made and nothing of
// the other's, which goes on counting exactly.
TEST_P(ClientsBuilds, AKilledClientLeavesTheOtherWorking) {
  for (const bool kill_run : {true, false}) {
    SCOPED_TRACE(kill_run ? "the run is killed" : "the recording is killed");
    RecordAndRun both(*c, object, dir.path, kill_run ? "a" : "b");
    ASSERT_TRUE(both.attached()) << both.errors();
    const Counts p0 = both.p0;
    run_a_while(*c);
    if (kill_run) {
      EXPECT_EQ(both.run->stop(SIGKILL), 128 + SIGKILL);
      EXPECT_TRUE(programs_become(c->pid(), 0)) << show(c->pid()).dump(2);
      EXPECT_TRUE(show(c->pid())["agent"].value("recording", false));
    } else {
      EXPECT_EQ(both.rec.stop(SIGKILL), 128 + SIGKILL);
      EXPECT_TRUE(recording_ends(c->pid())) << show(c->pid()).dump(2);
      EXPECT_EQ(programs_shown(show(c->pid())), 2u);
    }
    both.stop_and_expect(kill_run, minus(run_a_while(*c), p0));
    const TextDiff d = text_back(c->pid(), target);
    EXPECT_EQ(d.bytes, 0u) << "with both gone, .text differs from the file at" << d.where;
    ASSERT_TRUE(c->resume());
  }
  expect_untouched_end();
}

// Two `run -p` with the same object: the same programs on the same functions (two links
// on count_a's trampoline, two probes' handlers at one address), each counting every call
// of its window; the first to end leaves the other's in place.
TEST_P(ClientsBuilds, TwoRunsOfTheSameProgram) {
  const Counts p0 = c->pause();
  auto first = std::make_unique<Runner>(object, c->pid(), dir.path + "/first");
  ASSERT_TRUE(first->attached()) << first->errors();
  Runner second(object, c->pid(), dir.path + "/second");
  ASSERT_TRUE(second.attached()) << second.errors();
  const json j = show(c->pid());
  EXPECT_EQ(programs_shown(j), 4u) << j.dump(2);
  if (GetParam() == "clang_pfe") {
    // count_a: one trampoline, a link of each client.
    for (const json& f : j.value("functions", json::array()))
      if (f.value("name", "") == "count_a") {
        ASSERT_EQ(f["links"].size(), 2u) << f.dump(2);
        EXPECT_NE(f["links"][0].value("client", 0), f["links"][1].value("client", 0)) << f.dump(2);
      }
  }
  const Counts p1 = run_a_while(*c);
  EXPECT_EQ(first->stop(SIGINT), 0) << first->errors();
  EXPECT_EQ(first->counts(), minus(p1, p0));
  first.reset();
  EXPECT_EQ(programs_shown(show(c->pid())), 2u);
  const Counts p2 = run_a_while(*c);
  EXPECT_EQ(second.stop(SIGINT), 0) << second.errors();
  EXPECT_EQ(second.counts(), minus(p2, p0));
  ASSERT_TRUE(c->resume());
  expect_untouched_end();
}

INSTANTIATE_TEST_SUITE_P(Builds, ClientsBuilds, ::testing::Values("clang_pfe", "gcc_pfe"),
                         [](const auto& info) { return info.param; });

// A `run -p` on a process started under `utramp record`: its programs run beside the
// launcher's recording (client 0), and its end, and a second run's SIGKILL, leave the
// recording's links in place; a `record -p` is refused (one recording at a time).
TEST(ClientsLaunched, RunOnALaunchedRecording) {
  const std::string target = target_path("clang_pfe");
  TempDir dir("utramp-clients");
  Counter c(target, nullptr, {UTRAMP_CLI, "record", "-q", "-o", dir.path + "/launched", "--"});
  ASSERT_TRUE(c.ready());
  const std::string object = object_for("clang_pfe");
  const Counts p0 = c.pause();
  {
    Runner run(object, c.pid(), dir.path + "/run");
    ASSERT_TRUE(run.attached()) << run.errors();
    const json j = show(c.pid());
    bool launch = false;
    for (const json& cl : j.value("clients", json::array())) launch = launch || cl.value("launch", false);
    EXPECT_TRUE(launch) << j.dump(2);
    const Counts p1 = run_a_while(c);
    EXPECT_EQ(run.stop(SIGINT), 0) << run.errors();
    EXPECT_EQ(run.counts(), minus(p1, p0));
  }
  {
    Runner killed(object, c.pid(), dir.path + "/killed");
    ASSERT_TRUE(killed.attached()) << killed.errors();
    EXPECT_EQ(killed.stop(SIGKILL), 128 + SIGKILL);
    EXPECT_TRUE(programs_become(c.pid(), 0)) << show(c.pid()).dump(2);
  }
  // The launcher's recording is untouched: its tracer links are there.
  const json j = show(c.pid());
  EXPECT_EQ(j["agent"].value("state", ""), "attached");
  bool traced = false;
  for (const json& f : j.value("functions", json::array()))
    if (f.value("name", "") == "count_a")
      for (const json& l : f["links"]) traced = traced || (l.value("type", "") == "tracer" && l.value("client", 1) == 0);
  EXPECT_TRUE(traced) << j.dump(2);
  auto rec = run_cli({"record", "-p", std::to_string(c.pid()), "-o", dir.path + "/second"});
  EXPECT_EQ(rec.exit_code, 2);
  EXPECT_NE(rec.err.find("started under utramp"), std::string::npos) << rec.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/second"));
  ASSERT_TRUE(c.resume());
  auto [res, code] = c.finish();
  EXPECT_EQ(code, 0);
  EXPECT_NE(res.find("ok: 8 workers"), std::string::npos) << res;
  EXPECT_GT(recorded_calls(dir.path + "/launched", "count_a"), 0);
}

// Int3 entries are the recording's alone: a `run -p` program on a function a recording
// beside it diverts by an int3 (gcc's five 1-byte NOPs) is refused, as it is with no
// recording; it would keep the int3 after the recording ended, when the program's
// handlers block SIGTRAP again. The recording goes on.
TEST_F(ClientsGcc, ARunIsRefusedTheRecordingsInt3Entries) {
  const Counts p0 = c->pause();
  Recorder rec(c->pid(), {"-o", dir.path + "/rec", "--mode", "block", "-q"}, dir.path + "/rec.err");
  ASSERT_TRUE(rec.recording()) << rec.errors();
  auto r = run_cli({"run", object_for("clang_pfe"), "-p", std::to_string(c->pid()), "--duration", "1s"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("count_a's entry is diverted by an int3 for a recording"), std::string::npos) << r.err;
  EXPECT_EQ(programs_shown(show(c->pid())), 0u);
  const Counts p1 = run_a_while(*c);
  EXPECT_EQ(rec.stop(SIGINT), 0) << rec.errors();
  EXPECT_EQ(recorded_calls(dir.path + "/rec", "count_a"), p1.first - p0.first);
  ASSERT_TRUE(c->resume());
  expect_untouched_end();
}

// `utramp detach -p` removes every client's: both CLIs then end, each saying there was
// nothing left of its own, and .text is the file's.
TEST_F(Clients, DetachRemovesEveryClients) {
  RecordAndRun both(*c, object, dir.path, "");
  ASSERT_TRUE(both.attached()) << both.errors();
  ASSERT_TRUE(c->resume());
  auto det = run_cli({"detach", "-p", std::to_string(c->pid())});
  EXPECT_EQ(det.exit_code, 0) << det.err;
  EXPECT_EQ(text_vs_file(c->pid(), target).bytes, 0u);
  const json j = show(c->pid());
  EXPECT_EQ(j["agent"].value("state", ""), "detached") << j.dump(2);
  EXPECT_EQ(programs_shown(j), 0u);
  EXPECT_EQ(both.run->stop(SIGINT), 0) << both.errors();
  EXPECT_EQ(both.rec.stop(SIGINT), 0) << both.errors();
  expect_untouched_end();
}

// What a `run -p` made is freed once it ends, after the grace period: its programs'
// code, and the map file's mapping (the printk ring alone is 1 MiB). Before, each run
// left them in the process (a private copy of the whole map file).
TEST_F(Clients, ARunsProgramsAndMapsAreFreed) {
  // The first run maps what stays for good (the agent, the trampolines' arenas).
  auto once = run_cli({"run", object, "-p", std::to_string(c->pid()), "--duration", "100ms"});
  ASSERT_EQ(once.exit_code, 0) << once.err;
  const long before = vm_size_kib(c->pid());
  constexpr int kRuns = 8;
  for (int i = 0; i < kRuns; ++i) {
    auto r = run_cli({"run", object, "-p", std::to_string(c->pid()), "--duration", "100ms"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  expect_all_released(c->pid());
  const long after = vm_size_kib(c->pid());
  EXPECT_LT(after - before, 1024) << kRuns << " runs grew the process from " << before << " KiB to " << after;
  expect_untouched_end();
}

// `utramp show -p` with a recording and a run attached, golden-tested: each client with
// what it made, each link with its client. Masked: paths, process and link ids, client
// ids (numbered in order of appearance), uids, times, addresses.
TEST_F(Clients, ShowGolden) {
  RecordAndRun both(*c, object, dir.path, "");
  ASSERT_TRUE(both.attached()) << both.errors();
  ASSERT_TRUE(c->resume());
  auto shown = run_cli({"show", "-p", std::to_string(c->pid())});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  MaskOptions o;
  o.times = false;
  o.literal = {{dir.path, "DIR"}, {target, "TARGET"}, {object, "OBJECT"}, {UTRAMP_CLI, "UTRAMP"}};
  o.known_ids = {std::to_string(c->pid()), std::to_string(both.rec.pid()), std::to_string(both.run->pid())};
  std::string text = mask(shown.out, o);
  // The asking client's pid, every uid and time, link ids, client ids.
  text = std::regex_replace(text, std::regex(R"( +T(\d+)\b)"), " T$1");  // pids' widths vary
  text = std::regex_replace(text, std::regex(R"(process \d+ \(uid \d+\))"), "process PID (uid UID)");
  text = std::regex_replace(text, std::regex(R"(\(uid \d+\))"), "(uid UID)");
  text = std::regex_replace(text, std::regex(R"(since \S+:)"), "since TIME:");
  text = std::regex_replace(text, std::regex(R"(#\d+)"), "#N");
  std::map<std::string, std::string> clients;
  text = detail::number_matches(text, std::regex(R"(client (\d+))"), clients, "C", false);
  expect_golden("show_clients", text);
  EXPECT_EQ(both.run->stop(SIGINT), 0) << both.errors();
  EXPECT_EQ(both.rec.stop(SIGINT), 0) << both.errors();
  expect_untouched_end();
}

#if CLIENTS_CYCLES > 0
// Clients coming and going in a loop while the workers run, nothing paused: a recording
// and two runs started and ended (Ctrl-C or SIGKILL) in a random order. The process never
// crashes, each client ends as asked, and at the end .text is the file's and the
// program's results are right.
TEST_F(Clients, ComeAndGoWhileThreadsRun) {
  std::mt19937 rng(1234);
  std::unique_ptr<Recorder> rec;
  std::unique_ptr<Runner> runs[2];
  std::string outs[3];  // each client's output, removed when it ends
  for (int i = 0; i < CLIENTS_CYCLES; ++i) {
    SCOPED_TRACE(fmt::format("step {}", i));
    const int which = static_cast<int>(rng() % 3);
    const bool hard = rng() % 4 == 0;  // SIGKILL instead of Ctrl-C
    const std::string out = fmt::format("{}/c{}", dir.path, i);
    if (which == 0) {
      if (!rec) {
        outs[0] = out;
        rec = std::make_unique<Recorder>(c->pid(), std::vector<std::string>{"-o", out, "-q"}, out + ".err");
        ASSERT_TRUE(rec->recording()) << rec->errors();
      } else {
        EXPECT_EQ(rec->stop(hard ? SIGKILL : SIGINT), hard ? 128 + SIGKILL : 0) << rec->errors();
        rec.reset();
        // The agent may still be logging its release there (a killed CLI's).
        std::error_code ignored;
        std::filesystem::remove_all(outs[0], ignored);
      }
    } else {
      auto& run = runs[which - 1];
      if (!run) {
        outs[which] = out;
        run = std::make_unique<Runner>(object, c->pid(), out);
        ASSERT_TRUE(run->attached()) << run->errors();
      } else {
        EXPECT_EQ(run->stop(hard ? SIGKILL : SIGINT), hard ? 128 + SIGKILL : 0) << run->errors();
        if (!hard) {
          EXPECT_GT(run->counts().first, 0);
        }
        run.reset();
        std::error_code ignored;
        std::filesystem::remove(outs[which], ignored);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (rec) {
    EXPECT_EQ(rec->stop(SIGINT), 0) << rec->errors();
  }
  for (auto& r : runs) {
    if (r) {
      EXPECT_EQ(r->stop(SIGINT), 0) << r->errors();
    }
  }
  expect_all_released(c->pid());
  expect_untouched_end();
}
#endif

}  // namespace
