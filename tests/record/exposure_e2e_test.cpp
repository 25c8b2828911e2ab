// What a recording exposes and what it keeps, end to end (`utramp record` and the agent):
//   - the agent believes only a configuration the CLI made for the user it runs as
//     (src/agent/trust.hpp): one another user wrote, or changed, is refused, nothing is
//     written where it says, and the CLI says why;
//   - a trace directory renamed away and replaced by a symbolic link (by a user who can
//     write its parent) gets nothing more from the agent;
//   - --follow-exec keeps the functions of the program before the exec
//     (functions-PID-N.tsv, process-PID.json "images").
// Cases that act as a second user (nobody) need root and say so when skipped.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli_runner.hpp"
#include "second_user.hpp"
#include "temp_dir.hpp"

namespace {

using namespace utramp::test;
namespace fs = std::filesystem;

const std::string kDir = UTRAMP_EXP_DIR;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Sets an environment variable for the programs a test starts, and restores it.
struct Env {
  std::string name;
  std::string old;
  bool had;
  Env(std::string n, const std::string& v) : name(std::move(n)) {
    const char* o = getenv(name.c_str());
    had = o != nullptr;
    if (had) old = o;
    setenv(name.c_str(), v.c_str(), 1);
  }
  ~Env() {
    if (had) setenv(name.c_str(), old.c_str(), 1);
    else unsetenv(name.c_str());
  }
};

// A configuration another user wrote, naming root's directory as the trace directory
// and one of root's files as the status file: the agent (run directly, as root) must
// neither start nor write there. Before the agent checked, it overwrote the file with
// its error and ended the program with status 125.
TEST(Exposure, AnotherUsersConfigurationIsRefused) {
  if (auto why = no_second_user(); !why.empty()) GTEST_SKIP() << why;
  TempDir tmp("utramp-exposure");
  ASSERT_EQ(chmod(tmp.path.c_str(), 0755), 0);
  const std::string roots = tmp.path + "/roots";
  ASSERT_EQ(mkdir(roots.c_str(), 0700), 0);
  const std::string victim = roots + "/precious";
  {
    std::ofstream(victim) << "precious\n";
  }
  const std::string theirs = tmp.path + "/theirs";
  ASSERT_TRUE(make_nobody_dir(theirs));
  const std::string config = nlohmann::json{{"shm_path", ""},
                                             {"trace_dir", roots},
                                             {"tracer", "none"},
                                             {"bpf_objects", {"/nonexistent.bpf.o"}},
                                             {"bpf_map_file", roots + "/maps"},
                                             {"bpf_status_file", victim}}
                                 .dump();
  ASSERT_TRUE(as_nobody([&] {
    const int fd = open((theirs + "/agent.json").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    return fd >= 0 && write(fd, config.data(), config.size()) == static_cast<ssize_t>(config.size()) &&
           close(fd) == 0;
  }));
  RunResult r;
  {
    Env preload("LD_PRELOAD", UTRAMP_AGENT_LIB);
    Env agent("UTRAMP_AGENT", theirs + "/agent.json");
    r = run_program({kDir + "/exec_second"});
  }
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "second 18\n");
  EXPECT_EQ(slurp(victim), "precious\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(roots), fs::directory_iterator()), 1) << "files written in " << roots;
}

// The configuration `record` wrote, changed before the agent read it (by a preloaded
// library that runs first, as another user able to write its directory could have): the
// agent refuses it and `record` says why.
void expect_refusal_reported(const std::string& how, const std::string& why) {
  TempDir tmp("utramp-exposure");
  const std::string dir = tmp.path + "/t";
  RunResult r;
  {
    Env preload("LD_PRELOAD", kDir + "/libtamper_preload.so");
    Env tamper("EXP_TAMPER", how);
    r = run_cli({"record", "-o", dir, "--", kDir + "/exec_second"});
  }
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "second 18\n");
  EXPECT_NE(r.err.find("the agent did not start in the target, nothing was traced"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(dir + "/agent.json: " + why), std::string::npos) << r.err;
}

TEST(Exposure, RecordSaysTheAgentRefusedAChangedConfiguration) {
  expect_refusal_reported("chmod", "mode 0644, not readable by its owner only");
  if (auto why = no_second_user(); !why.empty()) GTEST_SKIP() << why;
  expect_refusal_reported("chown", "owned by uid 65534, not 0");
}

// Root records into a directory whose parent another user can write. While the target
// runs, that user renames the trace directory away and puts a symbolic link to a
// directory of root's in its place; then the target forks, and the child's agent writes
// its process's files. None may reach root's directory.
TEST(Exposure, TraceDirectoryReplacedUnderTheRecordingGetsNothing) {
  if (auto why = no_second_user(); !why.empty()) GTEST_SKIP() << why;
  TempDir tmp("utramp-exposure");
  ASSERT_EQ(chmod(tmp.path.c_str(), 0755), 0);
  const std::string shared = tmp.path + "/shared";
  ASSERT_TRUE(make_nobody_dir(shared));
  const std::string roots = tmp.path + "/roots";
  ASSERT_EQ(mkdir(roots.c_str(), 0700), 0);
  const std::string dir = shared + "/t", ready = tmp.path + "/ready", go = tmp.path + "/go";
  RunResult r;
  std::thread recording([&] { r = run_cli({"record", "-o", dir, "--", kDir + "/swap_target", ready, go}); });
  for (int i = 0; i < 20000 && access(ready.c_str(), F_OK) != 0; ++i) usleep(1000);
  const bool started = access(ready.c_str(), F_OK) == 0;
  const bool swapped = started && as_nobody([&] {
    return rename(dir.c_str(), (shared + "/moved").c_str()) == 0 && symlink(roots.c_str(), dir.c_str()) == 0;
  });
  {
    std::ofstream(go) << "go\n";
  }
  recording.join();
  ASSERT_TRUE(started) << r.err;
  ASSERT_TRUE(swapped);
  const size_t at = r.out.find("child ");
  ASSERT_NE(at, std::string::npos) << r.out << r.err;
  const std::string child = std::to_string(std::stoi(r.out.substr(at + 6)));
  for (const auto& e : fs::directory_iterator(roots)) {
    const std::string name = e.path().filename();
    EXPECT_FALSE(name.starts_with("functions-") || name.starts_with("maps-") || name.starts_with("agent-") ||
                 name == "process-" + child + ".json")
        << "the agent wrote " << name << " into root's directory through the planted link";
  }
}

// --follow-exec: exec_first calls first_image_work and execs exec_second, which calls
// second_image_work, in the same process. Both names are kept: the functions of the
// program before the exec in functions-PID-0.tsv, and replay names each call.
TEST(Exposure, FollowExecKeepsTheNamesBeforeAndAfterExec) {
  TempDir tmp("utramp-exposure");
  const std::string dir = tmp.path + "/t";
  auto r = run_cli({"record", "--follow-exec", "-o", dir, "--", kDir + "/exec_first", kDir + "/exec_second"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "first 6\nsecond 18\n");
  auto replay = run_cli({"replay", dir});
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_NE(replay.out.find("first_image_work"), std::string::npos) << replay.out;
  EXPECT_NE(replay.out.find("second_image_work"), std::string::npos) << replay.out;
  auto report = run_cli({"report", dir});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("first_image_work"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("second_image_work"), std::string::npos) << report.out;
  // The files: one process, two programs.
  std::vector<std::string> processes;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().starts_with("process-")) processes.push_back(e.path());
  ASSERT_EQ(processes.size(), 1u);
  const auto p = nlohmann::json::parse(slurp(processes[0]));
  ASSERT_EQ(p["images"].size(), 2u) << p.dump();
  EXPECT_EQ(p["images"][0]["command"][0], kDir + "/exec_first");
  EXPECT_EQ(p["images"][1]["command"][0], kDir + "/exec_second");
  EXPECT_EQ(p["command"], p["images"][1]["command"]);
  const std::string pid = std::to_string(p["pid"].get<uint32_t>());
  EXPECT_NE(slurp(dir + "/functions-" + pid + "-0.tsv").find("first_image_work"), std::string::npos);
  EXPECT_NE(slurp(dir + "/functions-" + pid + ".tsv").find("second_image_work"), std::string::npos);
}

// A -pg program that execs (gmon's profiling timer running) under --follow-exec lives
// as it does untraced: the agent's start-up in the new image does not count against the
// timer the exec kept (agent.cpp, "The CPU-time timers stand still").
TEST(Exposure, FollowExecOfAProfiledProgramIsNotKilledBySigprof) {
  const std::string prog = kDir + "/pg_exec";
  TempDir tmp("utramp-exposure");
  RunOptions in_tmp;  // gmon.out goes there
  in_tmp.cwd = tmp.path;
  const auto untraced = run_program({prog}, in_tmp);
  ASSERT_EQ(untraced.exit_code, 0) << untraced.err;
  ASSERT_EQ(untraced.out, "parent 6\nchild 21\n");
  for (int i = 0; i < 3; ++i) {
    const std::string dir = tmp.path + "/t" + std::to_string(i);
    auto r = run_cli({"record", "--follow-exec", "-o", dir, "--", prog}, in_tmp);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, untraced.out);
    auto replay = run_cli({"replay", dir});
    ASSERT_EQ(replay.exit_code, 0) << replay.err;
    EXPECT_NE(replay.out.find("pg_exec_work"), std::string::npos) << replay.out;
  }
}

}  // namespace
