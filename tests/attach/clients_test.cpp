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
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bpf_runner.hpp"
#include "cli_runner.hpp"
#include "counter_fixture.hpp"
#include "temp_dir.hpp"

#ifndef CLIENTS_CYCLES
#define CLIENTS_CYCLES 0
#endif

namespace {

using nlohmann::json;
using utramp::test::Counter;
using utramp::test::recorded_calls;
using utramp::test::Recorder;
using utramp::test::Runner;
using utramp::test::run_cli;
using utramp::test::target_path;
using utramp::test::TempDir;
using utramp::test::text_back;
using utramp::test::text_vs_file;
using utramp::test::TextDiff;

using Counts = std::pair<long, long>;
Counts minus(Counts a, Counts b) { return {a.first - b.first, a.second - b.second}; }

// The object that counts count_a's and count_b's calls in BUILD.
std::string object_for(const std::string& build) {
  return std::string(CLIENTS_BPF_DIR) + (build == "clang_pfe" ? "/count_calls.bpf.o" : "/count_probes.bpf.o");
}

json show(pid_t pid) {
  auto r = run_cli({"show", "-p", std::to_string(pid), "--json"});
  return r.exit_code == 0 ? json::parse(r.out, nullptr, false) : json{{"failed", r.err}};
}

// The eBPF programs show -p lists, each client's.
size_t programs_shown(const json& j) {
  return j.contains("bpf") ? j["bpf"].value("programs", json::array()).size() : 0;
}

// Waits up to 10 s for show -p to list N eBPF programs.
bool programs_become(pid_t pid, size_t n) {
  for (int i = 0; i < 200; ++i) {
    if (programs_shown(show(pid)) == n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Waits up to 10 s for the recording to be gone from show -p.
bool recording_ends(pid_t pid) {
  for (int i = 0; i < 200; ++i) {
    if (!show(pid)["agent"].value("recording", true)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Lets the paused workers run a little, then pauses them: the counts so far.
Counts run_a_while(Counter& c) {
  if (!c.resume()) return {-1, -1};
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return c.pause();
}

// The process's address space (VmSize of /proc/PID/status), in KiB.
long vm_size_kib(pid_t pid) {
  std::istringstream in(utramp::test::read_file(fmt::format("/proc/{}/status", pid)));
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("VmSize:")) return std::stol(line.substr(7));
  return -1;
}

class ClientsBuilds : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    target_ = target_path(GetParam());
    if (!std::filesystem::exists(target_)) GTEST_SKIP() << target_ << " not built (no such compiler)";
    object_ = object_for(GetParam());
  }
  std::string target_, object_;
};

// A recording and eBPF programs at once, each ending first in turn: each gets exactly the
// calls of its own window, the one left goes on alone, and once both are gone .text is
// the file's.
TEST_P(ClientsBuilds, RecordAndRunSideBySide) {
  Counter c(target_);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-clients");
  for (const bool run_ends_first : {true, false}) {
    SCOPED_TRACE(run_ends_first ? "the run ends first" : "the recording ends first");
    const std::string tag = run_ends_first ? "a" : "b";
    const Counts p0 = c.pause();
    ASSERT_GE(p0.first, 0);
    Recorder rec(c.pid(), {"-o", dir.path + "/rec" + tag, "--mode", "block", "-q"}, dir.path + "/rec" + tag + ".err");
    ASSERT_TRUE(rec.recording()) << rec.errors();
    Runner run(object_, c.pid(), dir.path + "/run" + tag);
    ASSERT_TRUE(run.attached()) << run.errors();
    // show -p: both clients, each with what it made.
    const json j = show(c.pid());
    size_t recording = 0, programs = 0;
    for (const json& cl : j.value("clients", json::array())) {
      if (!cl.value("recording", std::string()).empty()) ++recording;
      if (!cl.value("bpf_objects", json::array()).empty()) ++programs;
    }
    EXPECT_EQ(recording, 1u) << j.dump(2);
    EXPECT_EQ(programs, 1u) << j.dump(2);
    const Counts p1 = run_a_while(c);
    ASSERT_GT(p1.first, p0.first);
    if (run_ends_first) {
      EXPECT_EQ(run.stop(SIGINT), 0) << run.errors();
      EXPECT_EQ(run.counts(), minus(p1, p0));
      EXPECT_GT(text_vs_file(c.pid(), target_).bytes, 0u) << "the recording's sites went with the run";
    } else {
      EXPECT_EQ(rec.stop(SIGINT), 0) << rec.errors();
      EXPECT_EQ(recorded_calls(dir.path + "/rec" + tag, "count_a"), p1.first - p0.first);
      EXPECT_EQ(recorded_calls(dir.path + "/rec" + tag, "count_b"), p1.second - p0.second);
      EXPECT_EQ(programs_shown(show(c.pid())), 2u) << "the run's programs went with the recording";
    }
    // The one left goes on alone.
    const Counts p2 = run_a_while(c);
    if (run_ends_first) {
      EXPECT_EQ(rec.stop(SIGINT), 0) << rec.errors();
      EXPECT_EQ(recorded_calls(dir.path + "/rec" + tag, "count_a"), p2.first - p0.first);
      EXPECT_EQ(recorded_calls(dir.path + "/rec" + tag, "count_b"), p2.second - p0.second);
    } else {
      EXPECT_EQ(run.stop(SIGINT), 0) << run.errors();
      EXPECT_EQ(run.counts(), minus(p2, p0));
    }
    const TextDiff d = text_vs_file(c.pid(), target_);
    ASSERT_TRUE(d.read);
    EXPECT_EQ(d.bytes, 0u) << "with both gone, .text differs from the file at" << d.where;
    ASSERT_TRUE(c.resume());
  }
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
}

// One client's CLI killed with SIGKILL: the agent removes what it made and nothing of
// the other's, which goes on counting exactly.
TEST_P(ClientsBuilds, AKilledClientLeavesTheOtherWorking) {
  Counter c(target_);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-clients");
  for (const bool kill_run : {true, false}) {
    SCOPED_TRACE(kill_run ? "the run is killed" : "the recording is killed");
    const std::string tag = kill_run ? "a" : "b";
    const Counts p0 = c.pause();
    ASSERT_GE(p0.first, 0);
    Recorder rec(c.pid(), {"-o", dir.path + "/rec" + tag, "--mode", "block", "-q"}, dir.path + "/rec" + tag + ".err");
    ASSERT_TRUE(rec.recording()) << rec.errors();
    Runner run(object_, c.pid(), dir.path + "/run" + tag);
    ASSERT_TRUE(run.attached()) << run.errors();
    run_a_while(c);
    if (kill_run) {
      EXPECT_EQ(run.stop(SIGKILL), 128 + SIGKILL);
      EXPECT_TRUE(programs_become(c.pid(), 0)) << show(c.pid()).dump(2);
      EXPECT_TRUE(show(c.pid())["agent"].value("recording", false));
    } else {
      EXPECT_EQ(rec.stop(SIGKILL), 128 + SIGKILL);
      EXPECT_TRUE(recording_ends(c.pid())) << show(c.pid()).dump(2);
      EXPECT_EQ(programs_shown(show(c.pid())), 2u);
    }
    const Counts p2 = run_a_while(c);
    if (kill_run) {
      EXPECT_EQ(rec.stop(SIGINT), 0) << rec.errors();
      EXPECT_EQ(recorded_calls(dir.path + "/rec" + tag, "count_a"), p2.first - p0.first);
      EXPECT_EQ(recorded_calls(dir.path + "/rec" + tag, "count_b"), p2.second - p0.second);
    } else {
      EXPECT_EQ(run.stop(SIGINT), 0) << run.errors();
      EXPECT_EQ(run.counts(), minus(p2, p0));
    }
    const TextDiff d = text_back(c.pid(), target_);
    EXPECT_EQ(d.bytes, 0u) << "with both gone, .text differs from the file at" << d.where;
    ASSERT_TRUE(c.resume());
  }
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
}

// Two `run -p` with the same object: the same programs on the same functions (two links
// on count_a's trampoline, two probes' handlers at one address), each counting every call
// of its window; the first to end leaves the other's in place.
TEST_P(ClientsBuilds, TwoRunsOfTheSameProgram) {
  Counter c(target_);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-clients");
  const Counts p0 = c.pause();
  auto first = std::make_unique<Runner>(object_, c.pid(), dir.path + "/first");
  ASSERT_TRUE(first->attached()) << first->errors();
  Runner second(object_, c.pid(), dir.path + "/second");
  ASSERT_TRUE(second.attached()) << second.errors();
  const json j = show(c.pid());
  EXPECT_EQ(programs_shown(j), 4u) << j.dump(2);
  if (GetParam() == "clang_pfe") {
    // count_a: one trampoline, a link of each client.
    for (const json& f : j.value("functions", json::array()))
      if (f.value("name", "") == "count_a") {
        ASSERT_EQ(f["links"].size(), 2u) << f.dump(2);
        EXPECT_NE(f["links"][0].value("client", 0), f["links"][1].value("client", 0)) << f.dump(2);
      }
  }
  const Counts p1 = run_a_while(c);
  EXPECT_EQ(first->stop(SIGINT), 0) << first->errors();
  EXPECT_EQ(first->counts(), minus(p1, p0));
  first.reset();
  EXPECT_EQ(programs_shown(show(c.pid())), 2u);
  const Counts p2 = run_a_while(c);
  EXPECT_EQ(second.stop(SIGINT), 0) << second.errors();
  EXPECT_EQ(second.counts(), minus(p2, p0));
  const TextDiff d = text_vs_file(c.pid(), target_);
  ASSERT_TRUE(d.read);
  EXPECT_EQ(d.bytes, 0u) << "with both gone, .text differs from the file at" << d.where;
  ASSERT_TRUE(c.resume());
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
}

INSTANTIATE_TEST_SUITE_P(Builds, ClientsBuilds, ::testing::Values("clang_pfe", "gcc_pfe"),
                         [](const auto& info) { return info.param; });

// A `run -p` on a process started under `utramp record`: its programs run beside the
// launcher's recording (client 0), and its end, and a second run's SIGKILL, leave the
// recording's links in place; a `record -p` is refused (one recording at a time).
TEST(Clients, RunOnALaunchedRecording) {
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

// `utramp detach -p` removes every client's: both CLIs then end, each saying there was
// nothing left of its own, and .text is the file's.
TEST(Clients, DetachRemovesEveryClients) {
  const std::string target = target_path("clang_pfe");
  Counter c(target);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-clients");
  Recorder rec(c.pid(), {"-o", dir.path + "/rec", "-q"}, dir.path + "/rec.err");
  ASSERT_TRUE(rec.recording()) << rec.errors();
  Runner run(object_for("clang_pfe"), c.pid(), dir.path + "/run");
  ASSERT_TRUE(run.attached()) << run.errors();
  auto det = run_cli({"detach", "-p", std::to_string(c.pid())});
  EXPECT_EQ(det.exit_code, 0) << det.err;
  EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
  const json j = show(c.pid());
  EXPECT_EQ(j["agent"].value("state", ""), "detached") << j.dump(2);
  EXPECT_EQ(programs_shown(j), 0u);
  EXPECT_EQ(run.stop(SIGINT), 0) << run.errors();
  EXPECT_EQ(rec.stop(SIGINT), 0) << rec.errors();
  EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
  EXPECT_EQ(c.finish().first, "ok: 8 workers\n");
}

// What a `run -p` made is freed once it ends, after the grace period: its programs'
// code, and the map file's mapping (the printk ring alone is 1 MiB). Before, each run
// left them in the process (a private copy of the whole map file).
TEST(Clients, ARunsProgramsAndMapsAreFreed) {
  const std::string target = target_path("clang_pfe");
  Counter c(target);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-clients");
  const std::string object = object_for("clang_pfe");
  // The first run maps what stays for good (the agent, the trampolines' arenas).
  auto once = run_cli({"run", object, "-p", std::to_string(c.pid()), "--duration", "100ms"});
  ASSERT_EQ(once.exit_code, 0) << once.err;
  const long before = vm_size_kib(c.pid());
  constexpr int kRuns = 8;
  for (int i = 0; i < kRuns; ++i) {
    auto r = run_cli({"run", object, "-p", std::to_string(c.pid()), "--duration", "100ms"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  json j;
  for (int i = 0; i < 200; ++i) {
    j = show(c.pid());
    if (j.value("awaiting_release", 1) == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(j.value("awaiting_release", 1), 0) << j.dump(2);
  const long after = vm_size_kib(c.pid());
  EXPECT_LT(after - before, 1024) << kRuns << " runs grew the process from " << before << " KiB to " << after;
  EXPECT_EQ(text_vs_file(c.pid(), target).bytes, 0u);
  EXPECT_EQ(c.finish().first, "ok: 8 workers\n");
}

#if CLIENTS_CYCLES > 0
// Clients coming and going in a loop while the workers run, nothing paused: a recording
// and two runs started and ended (Ctrl-C or SIGKILL) in a random order. The process never
// crashes, each client ends as asked, and at the end .text is the file's and the
// program's results are right.
TEST(ClientsStress, ClientsComeAndGo) {
  const std::string target = target_path("clang_pfe");
  Counter c(target);
  ASSERT_TRUE(c.ready());
  TempDir dir("utramp-clients");
  const std::string object = object_for("clang_pfe");
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
        rec = std::make_unique<Recorder>(c.pid(), std::vector<std::string>{"-o", out, "-q"}, out + ".err");
        ASSERT_TRUE(rec->recording()) << rec->errors();
      } else {
        EXPECT_EQ(rec->stop(hard ? SIGKILL : SIGINT), hard ? 128 + SIGKILL : 0) << rec->errors();
        rec.reset();
        std::filesystem::remove_all(outs[0]);
      }
    } else {
      auto& run = runs[which - 1];
      if (!run) {
        outs[which] = out;
        run = std::make_unique<Runner>(object, c.pid(), out);
        ASSERT_TRUE(run->attached()) << run->errors();
      } else {
        EXPECT_EQ(run->stop(hard ? SIGKILL : SIGINT), hard ? 128 + SIGKILL : 0) << run->errors();
        if (!hard) {
          EXPECT_GT(run->counts().first, 0);
        }
        run.reset();
        std::filesystem::remove(outs[which]);
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
  const TextDiff d = text_back(c.pid(), target);
  EXPECT_EQ(d.bytes, 0u) << ".text differs from the file at" << d.where;
  // What gone clients' programs used is freed after the grace period.
  json j;
  for (int i = 0; i < 200; ++i) {
    j = show(c.pid());
    if (j.value("awaiting_release", 1) == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(j.value("awaiting_release", 1), 0) << j.dump(2);
  auto [res, code] = c.finish();
  EXPECT_EQ(res, "ok: 8 workers\n");
  EXPECT_EQ(code, 0);
}
#endif

}  // namespace
