// The recording's faults (docs/tracing.md, "When things go wrong"): each test makes one
// happen to a real `utramp record` (or `run`, `hist`) and checks what utramp guarantees
// after it — nothing lost without saying so, nothing of another user's followed or
// overwritten, nothing left behind.
//
//   disk full               a tmpfs of 4 MiB (root only: mount(2); skipped otherwise)
//   a scribbling target     faults_fixture.c `scribble`: a stray memset over the rings
//   two records, one DIR    the second is refused, the first's files stay
//   children that outlive   waited for (--wait-children), or said to be cut
//   kill -9 of the CLI      nothing left in /dev/shm or TMPDIR; the trace says it was cut
//   permissions             0700/0600 whatever the umask; a directory or symbolic link
//                           planted by another user (nobody) is refused (root only)
//
// Processes these tests start are reaped here: the test process is a child subreaper,
// so that a target whose CLI was killed (or a child that outlives its parent) becomes
// its child, never a zombie left to whatever init the machine has.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_runner.hpp"
#include "temp_dir.hpp"
#include "trace/trace_dir.hpp"

namespace fs = std::filesystem;
using utramp::test::RunResult;
using utramp::test::run_cli;

namespace {

const std::string kFixture = UTRAMP_FAULTS_FIXTURE;
const std::string kBpf = UTRAMP_BPF_EXAMPLES_DIR "/latency.bpf.o";
constexpr int kExitIoError = 74;  // record: the trace could not be saved whole (EX_IOERR)

struct TempDir : utramp::test::TempDir {
  TempDir() : utramp::test::TempDir("utramp-faults") {}
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(read_file(path), nullptr, false);
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Orphans (a target whose CLI was killed, a child that outlived its parent) are
// reparented to this process, which reaps them.
void adopt_orphans() { ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0) << strerror(errno); }

// Waits up to TIMEOUT_S for PID (a child or an adopted orphan) to end, then kills it;
// returns its exit code (128 + signal).
int reap(pid_t pid, int timeout_s = 60) {
  int st = 0;
  for (int waited = 0;; waited += 10) {
    const pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) break;
    if (r < 0) return -1;
    if (waited >= timeout_s * 1000) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      break;
    }
    sleep_ms(10);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
}

// A CLI started in the background, its stdout and stderr in files of DIR.
struct Background {
  pid_t pid = -1;
  std::string out, err;
  Background(const std::vector<std::string>& args, const std::string& dir) {
    out = dir + "/bg.out";
    err = dir + "/bg.err";
    std::vector<std::string> a = args;
    a.insert(a.begin(), UTRAMP_CLI);
    std::vector<char*> argv;
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    pid = fork();
    if (pid == 0) {
      const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int in = open("/dev/null", O_RDONLY);
      dup2(o, STDOUT_FILENO);
      dup2(e, STDERR_FILENO);
      dup2(in, STDIN_FILENO);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~Background() {
    if (pid > 0) reap(pid, 0);
  }
  int wait(int timeout_s = 120) {
    const int code = reap(pid, timeout_s);
    pid = -1;
    return code;
  }
  std::string stderr_text() const { return read_file(err); }
};

// Waits for the target's READY file; returns the pid it wrote there (0: it never came).
pid_t wait_ready(const std::string& ready, int timeout_s = 60) {
  for (int waited = 0; waited < timeout_s * 1000; waited += 10) {
    if (fs::exists(ready)) return static_cast<pid_t>(std::stol(read_file(ready)));
    sleep_ms(10);
  }
  return 0;
}

void touch(const std::string& path) { std::ofstream(path) << "go\n"; }

// Calls of each function in a trace, by thread: {tid: {name: calls}}.
std::map<uint32_t, std::map<std::string, uint64_t>> calls_by_thread(const std::string& dir) {
  std::map<uint32_t, std::map<std::string, uint64_t>> out;
  auto r = utramp::trace::TraceReader::open(dir);
  if (!r) {
    ADD_FAILURE() << r.error().message;
    return out;
  }
  for (auto [pid, tid] : r->threads()) {
    auto s = r->stream(pid, tid);
    while (auto e = s->next())
      if (e->type == static_cast<uint8_t>(utramp::trace::EventType::entry))
        if (const auto* f = r->symbols(pid).find(e->addr)) ++out[tid][f->name];
  }
  return out;
}

uint64_t total_calls(const std::string& dir, const std::string& fn) {
  uint64_t n = 0;
  for (const auto& [tid, fns] : calls_by_thread(dir))
    if (auto it = fns.find(fn); it != fns.end()) n += it->second;
  return n;
}

// ---- disk full ----

// A small tmpfs, unmounted (lazily: a target may still hold a file) when the test ends.
struct SmallFs {
  std::string path;
  std::string why_not;  // set when it could not be mounted
  SmallFs(const std::string& at, const char* size) : path(at) {
    mkdir(path.c_str(), 0700);
    const std::string opts = std::string("size=") + size + ",mode=0700";
    if (geteuid() != 0)
      why_not = "mounting a tmpfs needs root";
    else if (mount("tmpfs", path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0)
      why_not = std::string("mount -t tmpfs: ") + strerror(errno);
  }
  ~SmallFs() {
    if (why_not.empty()) umount2(path.c_str(), MNT_DETACH);
  }
};

// The disk fills while recording: record says how many events it recorded and how many
// reached the disk, exits 74, and leaves a directory that replay reads up to the cut,
// saying where it was cut.
TEST(DiskFull, TheLossIsSaidAndTheTraceReadsUpToTheCut) {
  TempDir t;
  SmallFs small(t.path + "/small", "4m");
  if (!small.why_not.empty()) GTEST_SKIP() << small.why_not;
  const std::string dir = small.path + "/trace";
  constexpr long kCalls = 400000;  // ~12 MiB of events: three times what fits
  // The program's own calls, counted exactly below (not its library calls); plain
  // records, which do not fit (compressed frames cut at a full disk: unit_trace_dir).
  const RunResult r = run_cli({"record", "-o", dir, "--no-libcall", "--compress", "none", "--", kFixture,
                               "fill", std::to_string(kCalls)},
                              {.timeout_s = 300});
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, kExitIoError) << r.err;
  std::smatch m;
  const std::regex cut(R"(No space left on device[^\n]*: (\d+) of (\d+) events saved, (\d+) not saved)");
  ASSERT_TRUE(std::regex_search(r.err, m, cut)) << r.err;
  const uint64_t saved = std::stoull(m[1]), recorded = std::stoull(m[2]), unsaved = std::stoull(m[3]);
  EXPECT_EQ(saved + unsaved, recorded);
  EXPECT_GT(unsaved, 0u);
  EXPECT_GT(saved, 0u);
  // Every event the target wrote (main, step, and each leaf: entry and exit) was recorded
  // or counted lost in its ring.
  uint64_t ring_lost = 0;
  if (std::regex_search(r.err, m, std::regex(R"((\d+) events lost)"))) ring_lost = std::stoull(m[1]);
  EXPECT_EQ(recorded + ring_lost, 2u * (kCalls + 2)) << r.err;

  // info.json was finished (from the space kept for it) and says the trace was cut.
  const auto info = read_json(dir + "/info.json");
  ASSERT_TRUE(info.is_object()) << read_file(dir + "/info.json");
  EXPECT_EQ(info["state"], "cut");
  EXPECT_NE(info["cut"]["reason"].get<std::string>().find("No space left on device"), std::string::npos);
  uint64_t info_events = 0, info_unsaved = 0;
  for (const auto& th : info["threads"]) {
    info_events += th["events"].get<uint64_t>();
    info_unsaved += th.value("unsaved", uint64_t{0});
  }
  EXPECT_EQ(info_events, saved);
  EXPECT_EQ(info_unsaved, unsaved);
  // Whole records only, and as many events as info.json says.
  auto reader = utramp::trace::TraceReader::open(dir);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  uint64_t streamed = 0, marked = 0;
  for (auto [pid, tid] : reader->threads()) {
    EXPECT_FALSE(reader->truncated(pid, tid));
    auto s = reader->stream(pid, tid);
    while (auto e = s->next())
      if (e->type == static_cast<uint8_t>(utramp::trace::EventType::lost)) marked += e->data;
      else ++streamed;
  }
  EXPECT_EQ(streamed, saved);
  EXPECT_EQ(marked, unsaved + ring_lost) << "the cut is marked where each thread's events stop";

  const RunResult replay = run_cli({"replay", dir}, {.timeout_s = 300});
  EXPECT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_NE(replay.err.find("the recording was cut at +"), std::string::npos) << replay.err;
  EXPECT_NE(replay.err.find("No space left on device"), std::string::npos) << replay.err;
  // Replay shows every loss: the cut's, and the ring's (a ring's loss next to the cut
  // is one marker with it, so the sum is what is compared, not each marker).
  uint64_t shown = 0;
  const std::regex lost_line(R"(<lost (\d+) events?>)");
  for (std::sregex_iterator it(replay.out.begin(), replay.out.end(), lost_line), end; it != end; ++it)
    shown += std::stoull((*it)[1]);
  EXPECT_EQ(shown, unsaved + ring_lost) << "ring_lost " << ring_lost;
}

// ---- a target that scribbles over its rings ----

// One thread of the target memsets its own ring and the rings' header (a stray memset)
// while three others trace: the recorder neither crashes nor loses the others' calls,
// and says which ring was overwritten.
TEST(Scribble, OtherThreadsLoseNothing) {
  TempDir t;
  const std::string dir = t.path + "/trace";
  const RunResult r = run_cli({"record", "-o", dir, "--", kFixture, "scribble"}, {.timeout_s = 300});
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << "3: the fixture found no ring to scribble on\n" << r.err;
  EXPECT_NE(r.err.find("overwrote its ring buffer"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the ring buffers' header was overwritten"), std::string::npos) << r.err;
  // The three workers: every call (one before the scribble, 20000 after).
  int workers = 0;
  for (const auto& [tid, fns] : calls_by_thread(dir)) {
    auto it = fns.find("w_call");
    if (it == fns.end()) continue;
    ++workers;
    EXPECT_EQ(it->second, 20001u) << "thread " << tid;
  }
  EXPECT_EQ(workers, 3);
  // info.json names the thread whose ring was overwritten, with what was found.
  const auto info = read_json(dir + "/info.json");
  int overwritten = 0;
  for (const auto& th : info["threads"])
    if (th.contains("overwritten")) ++overwritten;
  EXPECT_EQ(overwritten, 1) << info.dump(2);
  const RunResult replay = run_cli({"replay", dir}, {.timeout_s = 120});
  EXPECT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_NE(replay.err.find("overwrote its ring buffer"), std::string::npos) << replay.err;
}

// ---- two recordings into one directory ----

TEST(Concurrent, SecondRecordIntoTheSameDirectoryIsRefused) {
  TempDir t;
  const std::string dir = t.path + "/trace", ready = t.path + "/ready", go = t.path + "/go";
  Background first({"record", "-o", dir, "--", kFixture, "ready_wait", ready, go}, t.path);
  ASSERT_NE(wait_ready(ready), 0) << read_file(first.err);
  const RunResult second = run_cli({"record", "-o", dir, "--", kFixture, "fill", "10"}, {.timeout_s = 120});
  EXPECT_EQ(second.exit_code, 2) << second.err;
  EXPECT_NE(second.err.find("another utramp record (pid " + std::to_string(first.pid) + ")"),
            std::string::npos)
      << second.err;
  touch(go);
  EXPECT_EQ(first.wait(), 0) << first.stderr_text();
  // The first recording is whole: main's step(-1), three before READY, three after.
  EXPECT_EQ(total_calls(dir, "step"), 7u);
  EXPECT_EQ(total_calls(dir, "leaf"), 0u) << "the second recording wrote into the first's directory";
  EXPECT_EQ(read_json(dir + "/info.json")["state"], "complete");
}

// ---- children that outlive the process record started ----

// The child sleeps 3 s, longer than the old 2 s of quiet after which record stopped,
// and owns no ring while it sleeps (it has made no traced call since the fork).
TEST(Children, AChildThatOutlivesItsParentIsWaitedFor) {
  adopt_orphans();
  TempDir t;
  const std::string dir = t.path + "/trace";
  const RunResult r = run_cli({"record", "-o", dir, "--", kFixture, "orphan", "3"}, {.timeout_s = 120});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(total_calls(dir, "child_work"), 5u) << r.err;
  EXPECT_EQ(read_json(dir + "/info.json")["still_running"].size(), 0u);
}

TEST(Children, WaitLimitSaysWhatWasCut) {
  adopt_orphans();
  TempDir t;
  const std::string dir = t.path + "/trace";
  const auto t0 = std::chrono::steady_clock::now();
  const RunResult r =
      run_cli({"record", "-o", dir, "--wait-children=1", "--", kFixture, "orphan", "4"}, {.timeout_s = 120});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(child (\d+))"))) << r.out;
  const uint32_t child = static_cast<uint32_t>(std::stoul(m[1]));
  EXPECT_NE(r.err.find("process " + std::to_string(child) + " was still running"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--wait-children"), std::string::npos) << r.err;
  const auto info = read_json(dir + "/info.json");
  ASSERT_EQ(info["still_running"].size(), 1u) << info.dump(2);
  EXPECT_EQ(info["still_running"][0], child);
  EXPECT_EQ(total_calls(dir, "child_work"), 0u);
  const RunResult replay = run_cli({"replay", dir}, {.timeout_s = 120});
  EXPECT_NE(replay.err.find("process " + std::to_string(child) + " was still running"), std::string::npos)
      << replay.err;
  // The child runs on after record ended (its stdout kept the pipe open: run_cli
  // returned when it ended); it was adopted here.
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}

// A child that execs a program without --follow-exec (fork then exec: a daemon,
// system()) records nothing more: record does not wait for it.
// Many children alive at once cost the recorder no descriptor each: under a limit of
// 64 descriptors, 150 live children must not cut the trace (the files need them).
TEST(Children, ManyLiveChildrenDoNotUseUpDescriptors) {
  TempDir t;
  const std::string dir = t.path + "/trace";
  const RunResult r = run_cli({"record", "-o", dir, "--", kFixture, "forks", "150"},
                              {.timeout_s = 120, .max_fds = 64});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("not saved"), std::string::npos) << r.err;
  EXPECT_EQ(total_calls(dir, "child_work"), 150u) << r.err;
}

TEST(Children, AChildThatExecsUntracedIsNotWaitedFor) {
  adopt_orphans();
  TempDir t;
  const std::string dir = t.path + "/trace";
  const auto t0 = std::chrono::steady_clock::now();
  const RunResult r = run_cli({"record", "-o", dir, "--", kFixture, "spawn", "30"}, {.timeout_s = 120});
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(child (\d+))"))) << r.out;
  const pid_t child = static_cast<pid_t>(std::stol(m[1]));
  kill(child, SIGKILL);
  EXPECT_EQ(reap(child), 128 + SIGKILL);
  EXPECT_LT(took, std::chrono::seconds(8)) << "record waited for an untraced program (--wait-children is 10 s)";
  EXPECT_EQ(r.err.find("still running"), std::string::npos) << r.err;
  EXPECT_EQ(read_json(dir + "/info.json")["still_running"].size(), 0u);
  EXPECT_EQ(total_calls(dir, "parent_work"), 1u);
}

// A daemon() child: glibc forks inside daemon() (no fork event from the agent's fork()),
// and the parent exits at once. Recorded whole, every time: record is a subreaper and
// finds it in the process tree once its parent is gone.
TEST(Children, ADaemonIsRecordedUntilItExits) {
  adopt_orphans();
  TempDir t;
  for (int run = 0; run < 3; ++run) {
    SCOPED_TRACE(run);
    const std::string dir = t.path + "/trace" + std::to_string(run);
    const RunResult r = run_cli({"record", "-o", dir, "--", kFixture, "daemon", "300"}, {.timeout_s = 120});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(total_calls(dir, "parent_work"), 1u) << r.err;
    EXPECT_EQ(total_calls(dir, "child_work"), 5u) << r.err;
    EXPECT_EQ(read_json(dir + "/info.json")["still_running"].size(), 0u);
  }
}

// A posix_spawn child (clone and exec: no fork event, no atfork handler, its agent not
// started yet when its parent exits) is traced under --follow-exec, and waited for.
TEST(Children, APosixSpawnChildIsRecorded) {
  adopt_orphans();
  TempDir t;
  const std::string dir = t.path + "/trace";
  const RunResult r = run_cli({"record", "-o", dir, "--follow-exec", "--", kFixture, "posix_spawn", "300"},
                              {.timeout_s = 120});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(child (\d+))"))) << r.out;
  EXPECT_EQ(total_calls(dir, "parent_work"), 1u) << r.err;
  EXPECT_EQ(total_calls(dir, "child_work"), 5u) << r.err;
  EXPECT_TRUE(fs::exists(dir + "/process-" + std::string(m[1]) + ".json"));
  EXPECT_EQ(read_json(dir + "/info.json")["still_running"].size(), 0u);
}

TEST(Children, WaitOptionValuesAreChecked) {
  TempDir t;
  for (const char* v : {"-1", "abc", "1e400", "nan", ""}) {
    SCOPED_TRACE(v);
    const RunResult r = run_cli({"record", "-o", t.path + "/trace", std::string("--wait-children=") + v, "--",
                                 kFixture, "fill", "1"},
                                {.timeout_s = 60});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("SECONDS or forever"), std::string::npos) << r.err;
  }
  const RunResult ok = run_cli({"record", "-o", t.path + "/trace", "--wait-children=forever", "--", kFixture,
                                "fill", "1"},
                               {.timeout_s = 60});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// ---- kill -9 of the CLI ----

// Files in /dev/shm whose name holds PID (the old CLI named its rings so).
std::vector<std::string> shm_files_of(pid_t pid) {
  std::vector<std::string> out;
  const std::string mark = "utramp-" + std::to_string(pid) + "-";
  for (const auto& e : fs::directory_iterator("/dev/shm"))
    if (e.path().filename().string().starts_with(mark)) out.push_back(e.path());
  return out;
}

TEST(Kill9, RecordLeavesNothingBehindAndTheTraceSaysItWasCut) {
  adopt_orphans();
  TempDir t;
  const std::string dir = t.path + "/trace", ready = t.path + "/ready", go = t.path + "/go";
  // Plain files: what is drained is written at once (compressed ones: below).
  Background cli({"record", "-o", dir, "--compress", "none", "--", kFixture, "ready_wait", ready, go}, t.path);
  const pid_t target = wait_ready(ready);
  ASSERT_NE(target, 0) << read_file(cli.err);
  sleep_ms(300);  // the calls before READY are drained
  EXPECT_EQ(shm_files_of(cli.pid), std::vector<std::string>{}) << "named ring buffers while recording";
  const pid_t cli_pid = cli.pid;
  ASSERT_EQ(kill(cli.pid, SIGKILL), 0);
  EXPECT_EQ(cli.wait(), 128 + SIGKILL);
  touch(go);
  EXPECT_EQ(reap(target), 0);
  EXPECT_EQ(shm_files_of(cli_pid), std::vector<std::string>{});
  // What was drained is there, and the trace says the recording did not finish.
  EXPECT_EQ(read_json(dir + "/info.json")["state"], "recording");
  EXPECT_GE(total_calls(dir, "work"), 3u);
  const RunResult replay = run_cli({"replay", dir}, {.timeout_s = 120});
  EXPECT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_NE(replay.err.find("the recording did not finish: utramp record (pid " + std::to_string(cli_pid) + ")"),
            std::string::npos)
      << replay.err;
  EXPECT_NE(replay.out.find("work"), std::string::npos) << replay.out;
}

// Compressed: what was drained more than a second before the kill is in the trace (the
// recorder writes the frames not yet full every second, from its writing thread), and
// the trace reads without a damaged frame.
TEST(Kill9, CompressedRecordKeepsWhatItDrainedASecondBefore) {
  adopt_orphans();
  TempDir t;
  const std::string dir = t.path + "/trace", ready = t.path + "/ready", go = t.path + "/go";
  Background cli({"record", "-o", dir, "--compress", "zstd", "--", kFixture, "ready_wait", ready, go}, t.path);
  const pid_t target = wait_ready(ready);
  ASSERT_NE(target, 0) << read_file(cli.err);
  sleep_ms(2500);  // drained at once, written within a second
  ASSERT_EQ(kill(cli.pid, SIGKILL), 0);
  EXPECT_EQ(cli.wait(), 128 + SIGKILL);
  touch(go);
  EXPECT_EQ(reap(target), 0);
  EXPECT_EQ(read_json(dir + "/info.json")["state"], "recording");
  EXPECT_EQ(total_calls(dir, "work"), 3u);
  auto r = utramp::trace::TraceReader::open(dir);
  ASSERT_TRUE(r.ok()) << r.error().message;
  for (const auto& w : r->warnings())
    EXPECT_EQ(w.find("zstd frame"), std::string::npos) << w;
}

// Ctrl-C, as a terminal sends it (SIGINT to the recorder and the program): the program
// ends of it, the recorder does not, and writes everything the program recorded, both
// plain and compressed (the writing thread's queue is emptied before the end).
TEST(CtrlC, RecordWritesEverythingTheProgramRecorded) {
  for (const char* compress : {"none", "zstd"}) {
    SCOPED_TRACE(compress);
    adopt_orphans();
    TempDir t;
    const std::string dir = t.path + "/trace", ready = t.path + "/ready", go = t.path + "/go";
    Background cli({"record", "-o", dir, "--compress", compress, "--", kFixture, "ready_wait", ready, go},
                   t.path);
    const pid_t target = wait_ready(ready);
    ASSERT_NE(target, 0) << read_file(cli.err);
    ASSERT_EQ(kill(cli.pid, SIGINT), 0);
    ASSERT_EQ(kill(target, SIGINT), 0);
    EXPECT_EQ(cli.wait(), 128 + SIGINT) << cli.stderr_text();
    EXPECT_EQ(reap(target, 0), -1);  // the recorder reaped it
    EXPECT_NE(cli.stderr_text().find("killed by SIGINT"), std::string::npos) << cli.stderr_text();
    EXPECT_EQ(read_json(dir + "/info.json")["state"], "complete");
    EXPECT_EQ(read_json(dir + "/info.json")["compression"], compress);
    EXPECT_EQ(total_calls(dir, "work"), 3u);
  }
}

// The names of the events files in DIR.
std::vector<std::string> events_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.starts_with("events-") && n.ends_with(".bin")) out.push_back(n);
  }
  return out;
}

// The CLI killed at the very instant its first events file appears (the exit of the
// system call that made the name, caught with ptrace): the file is there with its whole
// header, never empty (which a reader takes for a corrupt trace). Every system call of
// the CLI's threads is stopped at until then; the target (its child, not traced) runs.
TEST(Kill9, AnEventsFileNeverAppearsWithoutItsHeader) {
  adopt_orphans();
  TempDir t;
  const std::string dir = t.path + "/trace", ready = t.path + "/ready", go = t.path + "/never";
  std::vector<std::string> a = {UTRAMP_CLI, "record", "-o", dir, "--", kFixture, "ready_wait", ready, go};
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  const std::string err = t.path + "/cli.err";
  const pid_t cli = fork();
  ASSERT_GE(cli, 0);
  if (cli == 0) {
    setpgid(0, 0);  // the CLI and its target, killed together below
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int in = open("/dev/null", O_RDWR);
    dup2(in, STDIN_FILENO);
    dup2(in, STDOUT_FILENO);
    dup2(e, STDERR_FILENO);
    if (ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0) _exit(126);  // no ptrace here (seccomp)
    raise(SIGSTOP);
    execv(argv[0], argv.data());
    _exit(127);
  }
  setpgid(cli, cli);
  int st = 0;
  ASSERT_EQ(waitpid(cli, &st, 0), cli);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 126) GTEST_SKIP() << "ptrace is not allowed here";
  ASSERT_TRUE(WIFSTOPPED(st));
  ASSERT_EQ(ptrace(PTRACE_SETOPTIONS, cli, nullptr,
                   PTRACE_O_TRACESYSGOOD | PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL),
            0)
      << strerror(errno);
  ASSERT_EQ(ptrace(PTRACE_SYSCALL, cli, nullptr, nullptr), 0);
  std::set<pid_t> threads = {cli};
  bool seen = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    const pid_t p = waitpid(-1, &st, __WALL);
    if (p < 0) {
      ADD_FAILURE() << "waitpid: " << strerror(errno);
      break;
    }
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      threads.erase(p);
      if (p == cli) {
        ADD_FAILURE() << "the CLI ended (status " << st << ") before any events file appeared";
        break;
      }
      continue;
    }
    if (!WIFSTOPPED(st)) continue;
    int deliver = 0;
    const int sig = WSTOPSIG(st);
    if (sig == (SIGTRAP | 0x80)) {
      seen = !events_files(dir).empty();  // at every system call's entry and exit
      if (seen) break;
    } else if (sig == SIGTRAP && (st >> 16) == PTRACE_EVENT_CLONE) {
      unsigned long tid = 0;
      ptrace(PTRACE_GETEVENTMSG, p, nullptr, &tid);
      threads.insert(static_cast<pid_t>(tid));
    } else if (sig == SIGTRAP && (st >> 16) != 0) {
      // another ptrace event (the exec): nothing to deliver
    } else if (sig == SIGSTOP && threads.count(p)) {
      // a new thread's first stop (or the group stop of SIGSTOP: not sent here)
    } else {
      deliver = sig;
    }
    if (threads.count(p) == 0) threads.insert(p);  // a new thread's stop before its clone event
    ptrace(PTRACE_SYSCALL, p, nullptr, reinterpret_cast<void*>(static_cast<uintptr_t>(deliver)));
  }
  kill(-cli, SIGKILL);
  while (waitpid(-1, &st, __WALL) > 0) {
  }
  ASSERT_TRUE(seen) << "no events file appeared; stderr:\n" << read_file(err);
  for (const std::string& n : events_files(dir)) {
    const std::string bytes = read_file(dir + "/" + n);
    ASSERT_GE(bytes.size(), sizeof(utramp::trace::EventFileHeader)) << n << ": " << bytes.size() << " bytes";
    EXPECT_EQ(bytes.compare(0, sizeof utramp::trace::kEventFileMagic,
                            std::string(utramp::trace::kEventFileMagic, sizeof utramp::trace::kEventFileMagic)),
              0)
        << n;
  }
  auto r = utramp::trace::TraceReader::open(dir);
  EXPECT_TRUE(r) << (r ? "" : r.error().message);
}

// TMPDIR as a test's own directory, for run and hist (their scratch directories).
struct TmpDirEnv {
  explicit TmpDirEnv(const std::string& d) { setenv("TMPDIR", d.c_str(), 1); }
  ~TmpDirEnv() { unsetenv("TMPDIR"); }
};

bool wait_empty(const std::string& d, int timeout_s) {
  for (int waited = 0; waited < timeout_s * 1000; waited += 10) {
    if (fs::is_empty(d)) return true;
    sleep_ms(10);
  }
  return false;
}

// `utramp run` removes its scratch directory (map file, agent configuration) as soon as
// the agent has started: a kill -9 then leaves nothing.
TEST(Kill9, RunLeavesNothingBehind) {
  if (!fs::exists(kBpf)) GTEST_SKIP() << "the eBPF examples are not built (no clang)";
  adopt_orphans();
  TempDir t, tmp;
  TmpDirEnv env(tmp.path);
  const std::string ready = t.path + "/ready", go = t.path + "/go";
  Background cli({"run", kBpf, "--", kFixture, "ready_wait", ready, go}, t.path);
  const pid_t target = wait_ready(ready);
  ASSERT_NE(target, 0) << read_file(cli.err);
  EXPECT_TRUE(wait_empty(tmp.path, 30)) << "still there: " << fs::directory_iterator(tmp.path)->path();
  ASSERT_EQ(kill(cli.pid, SIGKILL), 0);
  EXPECT_EQ(cli.wait(), 128 + SIGKILL);
  touch(go);
  EXPECT_EQ(reap(target), 0);
  EXPECT_TRUE(fs::is_empty(tmp.path));
}

// `utramp hist` needs its scratch trace until the end: one left by a killed CLI is
// removed by the next CLI that starts; one of a CLI still alive is not.
TEST(Kill9, StaleScratchIsRemovedAtTheNextStart) {
  adopt_orphans();
  TempDir t, tmp;
  TmpDirEnv env(tmp.path);
  const std::string ready = t.path + "/ready", go = t.path + "/go";
  Background cli({"hist", "step", "--", kFixture, "ready_wait", ready, go}, t.path);
  const pid_t target = wait_ready(ready);
  ASSERT_NE(target, 0) << read_file(cli.err);
  ASSERT_EQ(kill(cli.pid, SIGKILL), 0);
  EXPECT_EQ(cli.wait(), 128 + SIGKILL);
  touch(go);
  EXPECT_EQ(reap(target), 0);
  ASSERT_FALSE(fs::is_empty(tmp.path)) << "the killed hist left nothing: nothing to test";
  // A directory named as a live CLI's (this process's pid) is kept.
  const std::string live = tmp.path + "/utramp-hist-" + std::to_string(getpid()) + "-abcdef";
  ASSERT_EQ(mkdir(live.c_str(), 0700), 0);
  const RunResult next = run_cli({"hist", "leaf", "--", kFixture, "fill", "5"}, {.timeout_s = 120});
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_NE(next.out.find("5 calls of leaf"), std::string::npos) << next.out;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(tmp.path)) left.push_back(e.path());
  EXPECT_EQ(left, std::vector<std::string>{live});
}

// A pid that no process has: one of a child that ended (reaped).
pid_t dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

// Older versions named their rings /dev/shm/utramp-PID-N.buffers (2 GiB sparse) and left
// them when killed: the next CLI that starts a program removes those of CLIs that are
// gone, and keeps those of a live one.
TEST(Kill9, OldRingFilesOfDeadCLIsAreRemoved) {
  const std::string dead = "/dev/shm/utramp-" + std::to_string(dead_pid()) + "-12345.buffers";
  const std::string live = "/dev/shm/utramp-" + std::to_string(getpid()) + "-12345.buffers";
  for (const auto& f : {dead, live}) {
    const int fd = open(f.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0) << f << ": " << strerror(errno);
    close(fd);
  }
  const RunResult r = run_cli({"hist", "leaf", "--", kFixture, "fill", "2"}, {.timeout_s = 120});
  const bool dead_left = fs::exists(dead), live_left = fs::exists(live);
  unlink(dead.c_str());
  unlink(live.c_str());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(dead_left) << dead;
  EXPECT_TRUE(live_left) << live;
}

// ---- nothing exposed ----

// Every directory and file of a trace is the user's alone, whatever the umask.
TEST(Permissions, OwnerOnlyWhateverTheUmask) {
  adopt_orphans();
  TempDir t;
  const std::string dir = t.path + "/trace";
  const mode_t old = umask(0);
  const RunResult r = run_cli({"record", "-o", dir, "--", kFixture, "orphan", "0"}, {.timeout_s = 120});
  umask(old);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  struct stat st {};
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ASSERT_EQ(lstat(e.path().c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode)) << e.path();
    EXPECT_EQ(st.st_mode & 07777, 0600u) << e.path();
    ++files;
  }
  EXPECT_GE(files, 5);  // info, events, functions, maps, process (two processes)
}

// Runs FN as the user nobody in a child process; true when it returned true.
template <class Fn>
bool as_nobody(Fn fn) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    _exit(fn() ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// root records into a world-writable directory (like /tmp) where another user has left
// a symbolic link, or a directory of their own, at the name given to -o: refused, and
// what the link points to is untouched.
TEST(Permissions, WhatAnotherUserPlantedIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to plant files as another user (nobody)";
  TempDir t;
  ASSERT_EQ(chmod(t.path.c_str(), 0755), 0);
  const std::string world = t.path + "/world", victim = t.path + "/victim";
  ASSERT_EQ(mkdir(world.c_str(), 0755), 0);
  ASSERT_EQ(chmod(world.c_str(), 01777), 0);  // like /tmp
  ASSERT_EQ(mkdir(victim.c_str(), 0755), 0);
  std::ofstream(victim + "/info.json") << "root's own file\n";

  const std::string link = world + "/trace", theirs = world + "/theirs";
  ASSERT_TRUE(as_nobody([&] {
    return symlink(victim.c_str(), link.c_str()) == 0 && mkdir(theirs.c_str(), 0777) == 0 &&
           chmod(theirs.c_str(), 0777) == 0;
  }));

  const RunResult via_link = run_cli({"record", "-o", link, "--", kFixture, "fill", "3"}, {.timeout_s = 60});
  EXPECT_EQ(via_link.exit_code, 2) << via_link.err;
  EXPECT_NE(via_link.err.find("a symbolic link owned by uid 65534"), std::string::npos) << via_link.err;
  EXPECT_EQ(read_file(victim + "/info.json"), "root's own file\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(victim), fs::directory_iterator()), 1);

  const RunResult into_theirs = run_cli({"record", "-o", theirs, "--", kFixture, "fill", "3"}, {.timeout_s = 60});
  EXPECT_EQ(into_theirs.exit_code, 2) << into_theirs.err;
  EXPECT_NE(into_theirs.err.find("owned by uid 65534"), std::string::npos) << into_theirs.err;
  EXPECT_TRUE(fs::is_empty(theirs));
}

}  // namespace
