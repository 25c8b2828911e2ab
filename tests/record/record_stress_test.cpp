// The function_graph tracer under live threads, end to end: stress_fixture.cpp (g++ and
// clang++) is recorded through the real `utramp record` CLI and agent while its threads
// make calls of known shapes, take timer signals whose handler calls traced functions,
// fork from inside traced frames, throw exceptions through them and longjmp over them;
// the test then reads every thread's events file record by record and checks exact
// properties (docs/trace-format.md):
//
//   - every record is well formed: a known type, no flags or aux (nothing captured), a
//     traced function's address, a sane depth, a leaf's exit time after its entry's;
//   - times never decrease within a thread;
//   - nesting: an entry at depth d has exactly d frames open, each exit closes the top
//     frame with the same function, each function is called by the one the fixture
//     calls it from, and exits have the kind expected (unwound, longjmp, normal);
//   - counts: per thread and function, entries and exits as the fixture made them;
//   - accounting: per thread, events delivered + events reported lost = events written,
//     and info.json and record's summary say the same.
//
// When a ring is small enough to drop events (discard mode) or lose them to the
// flight recorder (overwrite mode), nesting can only be checked loosely after the
// first loss and counts become bounds; the accounting stays exact.
//
// Labelled `stress`, so scripts/test.sh also runs it in the AddressSanitizer build (the
// agent instrumented inside the uninstrumented fixture, see SetUp). Each test takes a
// few seconds at most; every process is reaped, the trace directory removed, and no
// ring file may be left in /dev/shm.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "temp_dir.hpp"
#include "trace/event.hpp"
#include "trace/trace_dir.hpp"
#include "trace/zstd_frames.hpp"

namespace fs = std::filesystem;
using utramp::trace::Event;
using utramp::trace::EventType;

namespace {

struct StressFixture {
  const char *file, *cc, *missing;
};

void PrintTo(const StressFixture& f, std::ostream* os) { *os << f.file; }

const StressFixture kFixtures[] = {
#define STRESS_FIXTURE(file, cc, missing) {file, cc, missing},
#include "stress_matrix.inc"
#undef STRESS_FIXTURE
};

std::set<std::string> shm_files() {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec))
    if (e.path().filename().string().starts_with("utramp-")) names.insert(e.path().filename());
  return names;
}

// ---- what the fixture does (see stress_fixture.cpp) ----

enum class Scenario { threads, signals, altstack, sigjump, fork, unwind };

const char* scenario_name(Scenario s) {
  switch (s) {
    case Scenario::threads: return "threads";
    case Scenario::signals: return "signals";
    case Scenario::altstack: return "altstack";
    case Scenario::sigjump: return "sigjump";
    case Scenario::fork: return "fork";
    case Scenario::unwind: return "unwind";
  }
  return "?";
}

struct Calls {
  uint64_t entries = 0, exits = 0, unwound = 0, longjmp = 0;
  uint64_t events() const { return entries + exits + unwound + longjmp; }
  bool operator==(const Calls&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Calls& c) {
  return os << "{entries " << c.entries << ", exits " << c.exits << ", unwound " << c.unwound
            << ", longjmp " << c.longjmp << "}";
}

using CallMap = std::map<std::string, Calls>;

// Thread k of the fixture's parent process, `iters` iterations.
CallMap expected_worker(Scenario s, int k, long iters) {
  CallMap m;
  auto add = [&](const char* f, uint64_t n, char how = 'x') {
    Calls& c = m[f];
    c.entries += n;
    if (how == 'x') c.exits += n;
    else if (how == 'u') c.unwound += n;
    else if (how == 'j') c.longjmp += n;
  };
  // Iteration 0 is s_top alone (it claims the thread's ring before the timer starts).
  uint64_t rec = 0, m4 = 0;
  for (long i = 0; i < iters; ++i) {
    rec += 1 + static_cast<uint64_t>((i + k) % 7);
    if (i > 0) m4 += 1 + static_cast<uint64_t>(i % 4);
  }
  add("s_top", iters);
  add("s_rec", rec);
  add("s_leaf", iters);
  add("s_leaf2", iters);
  if (s == Scenario::fork) {
    add("s_fork_a", 1);
    add("s_fork_b", 1);
  }
  if (s == Scenario::altstack) {
    add("s_alt_jumper", 1);
    add("s_raiser", 1, 'j');
    add("s_sig_jump", 1, 'j');
    add("s_after", 1);
  }
  if (s == Scenario::unwind) {
    add("s_catcher", iters - 1);
    add("s_thrower", iters - 1, 'u');
    add("s_throw_rec", m4, 'u');
    add("s_jumper", iters - 1);
    add("s_jump_rec", m4, 'j');
    add("s_after", iters - 1);
  }
  return m;
}

// The only thread of a child forked by the fork scenario: the frames it inherited
// (entries re-emitted, never exited: it _exits), then s_child_work.
CallMap expected_child() {
  CallMap m;
  m["s_top"].entries = m["s_fork_a"].entries = m["s_fork_b"].entries = 1;
  m["s_child_work"] = {1, 1, 0, 0};
  m["s_rec"] = {30, 30, 0, 0};
  m["s_leaf"] = {10, 10, 0, 0};
  return m;
}

// Who calls each function ("" = no traced caller), and how its frames end.
struct Shape {
  std::set<std::string> callers;
  char exit_kind;  // 'x' normal, 'u' unwound, 'j' longjmp
};

const std::map<std::string, Shape>& shapes() {
  static const std::map<std::string, Shape> m = {
      {"s_top", {{""}, 'x'}},
      {"s_rec", {{"s_top", "s_rec", "s_child_work"}, 'x'}},
      {"s_leaf", {{"s_rec"}, 'x'}},
      {"s_leaf2", {{"s_top"}, 'x'}},
      {"s_sig_leaf", {{"s_sig_outer"}, 'x'}},
      {"s_child_work", {{"s_fork_b"}, 'x'}},
      {"s_fork_a", {{"s_top"}, 'x'}},
      {"s_fork_b", {{"s_fork_a"}, 'x'}},
      {"s_catcher", {{""}, 'x'}},
      {"s_thrower", {{"s_catcher"}, 'u'}},
      {"s_throw_rec", {{"s_thrower", "s_throw_rec"}, 'u'}},
      {"s_jumper", {{""}, 'x'}},
      {"s_jump_rec", {{"s_jumper", "s_jump_rec"}, 'j'}},
      {"s_after", {{"s_jumper", "s_alt_jumper"}, 'x'}},
      {"s_alt_jumper", {{""}, 'x'}},
      {"s_raiser", {{"s_alt_jumper"}, 'j'}},
      {"s_sig_jump", {{"s_raiser"}, 'j'}},
      // s_sig_outer: the handler runs wherever the thread was (any caller)
  };
  return m;
}

// ---- reading and checking one thread's events ----

std::vector<Event> read_events(const std::string& path, std::string* err) {
  std::vector<Event> out;
  std::ifstream in(path, std::ios::binary);
  utramp::trace::EventFileHeader h{};
  if (!in.read(reinterpret_cast<char*>(&h), sizeof h)) {
    *err = path + ": no header";
    return out;
  }
  if (memcmp(h.magic, utramp::trace::kEventFileMagic, 8) != 0 || h.record_size != sizeof(Event)) {
    *err = path + ": bad header";
    return out;
  }
  if (h.flags & utramp::trace::kEventFileZstd) {  // record --compress zstd: its frames' records
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    utramp::trace::ZstdFrameReader frames(sizeof h);
    std::vector<Event> frame;
    while (frames.next(fd, &frame)) out.insert(out.end(), frame.begin(), frame.end());
    if (!frames.error().empty()) *err = path + ": " + frames.error();
    if (fd >= 0) ::close(fd);
    return out;
  }
  Event e;
  while (in.read(reinterpret_cast<char*>(&e), sizeof e)) out.push_back(e);
  if (in.gcount() != 0) *err = path + ": partial record at the end";
  return out;
}

struct ThreadCheck {
  CallMap calls;          // by function name
  uint64_t delivered = 0;  // events (a leaf is two), `lost` markers not counted
  uint64_t lost = 0;       // sum of `lost` markers
  uint64_t leaves = 0, forks = 0;
  std::vector<std::string> open;  // frames still open at the end, outermost first
  std::vector<std::string> errors;
  uint64_t mismatches = 0;  // nesting errors after a loss (tolerated when loose)
};

// `loose`: after a `lost` marker, nesting is resynchronised from the depths instead of
// failing (a ring that dropped single events); before one, it is strict. `any_jump`: any
// frame may exit by longjmp (a signal handler that siglongjmps out of anything).
ThreadCheck check_thread(const std::vector<Event>& evs, const utramp::trace::SymbolTable& syms,
                         bool loose, bool any_jump = false) {
  ThreadCheck r;
  auto error = [&](size_t i, const std::string& what) {
    if (r.errors.size() < 20) r.errors.push_back("event " + std::to_string(i) + ": " + what);
  };
  struct Open {
    std::string func;  // "" = unknown (its entry was lost)
  };
  std::vector<Open> stack;
  uint64_t last_time = 0;
  bool seen_loss = false;
  for (size_t i = 0; i < evs.size(); ++i) {
    const Event& e = evs[i];
    const auto type = static_cast<EventType>(e.type);
    if (e.time < last_time)
      error(i, "time went back by " + std::to_string(last_time - e.time) + " ticks");
    last_time = e.time;
    if (e.flags != 0 || e.aux != 0) error(i, "flags/aux set (nothing is captured)");
    if (type == EventType::lost) {
      if (e.data == 0 || e.addr != 0) error(i, "malformed lost marker");
      r.lost += e.data;
      seen_loss = true;
      continue;
    }
    if (type == EventType::fork) {
      ++r.forks;
      ++r.delivered;
      continue;
    }
    const bool is_entry = type == EventType::entry || type == EventType::leaf;
    const bool is_exit = type == EventType::exit || type == EventType::exit_unwound ||
                         type == EventType::exit_longjmp;
    if (!is_entry && !is_exit) {
      error(i, "unexpected type " + std::to_string(e.type));
      continue;
    }
    const utramp::trace::Function* f = syms.find(e.addr);
    if (f == nullptr || f->addr != e.addr || !f->name.starts_with("s_")) {
      error(i, "address " + std::to_string(e.addr) + " is no traced function");
      continue;
    }
    if (e.depth > 64) error(i, "depth " + std::to_string(e.depth));
    const std::string& name = f->name;
    auto nest_error = [&](const std::string& what) {
      if (loose && seen_loss) ++r.mismatches;
      else error(i, name + " depth " + std::to_string(e.depth) + ": " + what);
    };
    if (is_entry) {
      Calls& c = r.calls[name];
      ++c.entries;
      ++r.delivered;
      if (e.depth != stack.size()) {
        nest_error("entry with " + std::to_string(stack.size()) + " frames open");
        stack.resize(e.depth);
      }
      const std::string caller = stack.empty() ? "" : stack.back().func;
      if (auto it = shapes().find(name); it != shapes().end() && !it->second.callers.count(caller))
        if (!(loose && seen_loss && caller.empty()))
          nest_error("called by '" + caller + "'");
      if (type == EventType::leaf) {
        ++r.leaves;
        ++r.delivered;
        ++c.exits;
        if (e.data < e.time) error(i, "leaf exits before it enters");
        last_time = e.data;
        if (auto it = shapes().find(name); it != shapes().end() && it->second.exit_kind != 'x')
          nest_error("returned normally");
      } else {
        stack.push_back({name});
      }
      continue;
    }
    Calls& c = r.calls[name];
    ++r.delivered;
    char kind = 'x';
    if (type == EventType::exit) ++c.exits;
    else if (type == EventType::exit_unwound) ++c.unwound, kind = 'u';
    else ++c.longjmp, kind = 'j';
    if (auto it = shapes().find(name);
        it != shapes().end() && it->second.exit_kind != kind && !(any_jump && kind == 'j'))
      nest_error(std::string("exit of kind ") + kind);
    if (stack.empty() || e.depth != stack.size() - 1 ||
        (stack.back().func != name && !stack.back().func.empty())) {
      nest_error("exit does not close the top frame (" +
                 (stack.empty() ? std::string("none") : stack.back().func) + " at depth " +
                 std::to_string(stack.size()) + ")");
      stack.resize(std::min<size_t>(stack.size(), e.depth));
      continue;
    }
    stack.pop_back();
  }
  for (const auto& o : stack) r.open.push_back(o.func);
  return r;
}

// ---- one recording ----

// What a test has the fixture do: SCENARIO in THREADS threads of ITERS iterations each.
struct Load {
  Scenario scenario;
  int threads;
  long iters;
  long period_us = 0;  // the signal timer's period; 0 leaves the fixture's default
};

struct Recorded {
  Load load;
  utramp::test::RunResult rec;
  std::string dir;
  std::map<int, long> tid_of;          // fixture thread k -> tid
  std::map<int, long> handler_runs;    // k -> signal handler runs
  std::map<int, long> child_pid;       // k -> pid of its forked child
  std::map<int, long> jumps;           // k -> handler runs that siglongjmp'd (sigjump)
  std::map<std::pair<uint32_t, uint32_t>, ThreadCheck> checks;  // (pid, tid)
  std::map<std::pair<uint32_t, uint32_t>, utramp::trace::ThreadInfo> infos;
  uint64_t summary_events = 0, summary_lost = 0;
  bool summary_found = false;
  double seconds = 0;
};

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
constexpr bool kAsan = __has_feature(address_sanitizer);
#else
constexpr bool kAsan = false;
#endif

class StressTest : public testing::TestWithParam<StressFixture> {
 protected:
  void SetUp() override {
    if (*GetParam().missing)
      GTEST_SKIP() << GetParam().file << " not built: " << GetParam().missing;
    if (kAsan) {
      // The AddressSanitizer build: the CLI and the agent are instrumented, the
      // fixture is not. The agent is preloaded ahead of the ASan runtime it needs, which
      // ASan refuses unless told to: its checks still apply to the agent's code (stack
      // and globals; the heap stays the program's, without redzones).
      const char* o = getenv("ASAN_OPTIONS");
      std::string opts = o ? o : "";
      if (opts.find("verify_asan_link_order") == std::string::npos) {
        opts += opts.empty() ? "verify_asan_link_order=0" : ":verify_asan_link_order=0";
        setenv("ASAN_OPTIONS", opts.c_str(), 1);
      }
    }
  }

  // Records LOAD with OPTS, checks every thread's events and makes the common checks.
  Recorded run(const Load& load, const std::vector<std::string>& opts, bool loose) {
    Recorded r;
    record(load, opts, loose, &r);
    check_common(r);
    return r;
  }

 private:
  // Records `fixture SCENARIO THREADS ITERS [PERIOD_US]` with OPTS and checks every
  // thread's events.
  void record(const Load& load, const std::vector<std::string>& opts, bool loose,
              Recorded* out) {
    out->load = load;
    const auto shm_before = shm_files();
    std::vector<std::string> argv = {UTRAMP_CLI, "record", "-o", tmp_.path + "/trace", "--only", "s_*"};
    argv.insert(argv.end(), opts.begin(), opts.end());
    argv.push_back("--");
    argv.push_back(std::string(UTRAMP_STRESS_DIR) + "/" + GetParam().file);
    argv.push_back(scenario_name(load.scenario));
    argv.push_back(std::to_string(load.threads));
    argv.push_back(std::to_string(load.iters));
    if (load.period_us) argv.push_back(std::to_string(load.period_us));
    const auto t0 = std::chrono::steady_clock::now();
    out->rec = utramp::test::run_program(argv);
    out->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out->dir = tmp_.path + "/trace";
    RecordProperty("seconds", std::to_string(out->seconds));
    // No ring file left behind. Other recordings may run meanwhile (utramp-PID-N.buffers,
    // PID: their CLI's): only a new file whose CLI is gone counts (ours is reaped).
    for (const auto& f : shm_files()) {
      if (shm_before.count(f)) continue;
      const long owner = std::atol(f.c_str() + std::strlen("utramp-"));
      if (owner > 0 && (::kill(static_cast<pid_t>(owner), 0) == 0 || errno == EPERM)) continue;
      ADD_FAILURE() << "left in /dev/shm: " << f;
    }

    std::istringstream lines(out->rec.out);
    std::string line;
    static const std::regex thread_re(R"(thread (\d+) tid (\d+) handler (\d+))");
    static const std::regex child_re(R"(child (\d+) pid (\d+) status (-?\d+))");
    static const std::regex jumps_re(R"(jumps (\d+) (\d+))");
    std::smatch m;
    while (std::getline(lines, line)) {
      if (std::regex_match(line, m, thread_re)) {
        out->tid_of[std::stoi(m[1])] = std::stol(m[2]);
        out->handler_runs[std::stoi(m[1])] = std::stol(m[3]);
      } else if (std::regex_match(line, m, child_re)) {
        out->child_pid[std::stoi(m[1])] = std::stol(m[2]);
      } else if (std::regex_match(line, m, jumps_re)) {
        out->jumps[std::stoi(m[1])] = std::stol(m[2]);
      }
    }
    static const std::regex summary(
        R"(utramp: (\d+) events recorded in .*; target exited 0(; (\d+) events lost)?)");
    if (std::regex_search(out->rec.err, m, summary)) {
      out->summary_found = true;
      out->summary_events = std::stoull(m[1]);
      out->summary_lost = m[3].matched ? std::stoull(m[3]) : 0;
    }

    auto reader = utramp::trace::TraceReader::open(out->dir);
    ASSERT_TRUE(reader.ok()) << reader.error().message;
    for (const auto& w : reader->warnings()) ADD_FAILURE() << "reader: " << w;
    for (const auto& t : reader->info().threads) out->infos[{t.pid, t.tid}] = t;
    for (const auto& [pid, tid] : reader->threads()) {
      std::string err;
      const auto evs = read_events(
          out->dir + "/events-" + std::to_string(pid) + "-" + std::to_string(tid) + ".bin", &err);
      EXPECT_TRUE(err.empty()) << err;
      out->checks[{pid, tid}] =
          check_thread(evs, reader->symbols(pid), loose, load.scenario == Scenario::sigjump);
    }
  }

  // The common checks of one recording: exit, output, accounting, well-formedness.
  void check_common(const Recorded& r) {
    const int nthreads = r.load.threads;
    ASSERT_EQ(r.rec.exit_code, 0) << r.rec.err << r.rec.out;
    ASSERT_EQ(r.tid_of.size(), static_cast<size_t>(nthreads)) << r.rec.out;
    ASSERT_TRUE(r.summary_found) << r.rec.err;
    uint64_t delivered = 0, lost = 0;
    for (const auto& [id, c] : r.checks) {
      SCOPED_TRACE("pid " + std::to_string(id.first) + " tid " + std::to_string(id.second));
      for (const auto& e : c.errors) ADD_FAILURE() << e;
      delivered += c.delivered;
      lost += c.lost;
      auto it = r.infos.find(id);
      ASSERT_NE(it, r.infos.end()) << "not in info.json";
      EXPECT_EQ(it->second.events, c.delivered) << "info.json events";
      EXPECT_EQ(it->second.lost, c.lost) << "info.json lost";
    }
    EXPECT_EQ(r.summary_events, delivered) << r.rec.err;
    EXPECT_EQ(r.summary_lost, lost) << r.rec.err;
    // Every traced thread is one the fixture names (or, for fork, a child).
    size_t expected_threads = static_cast<size_t>(nthreads);
    if (r.load.scenario == Scenario::fork) expected_threads *= 2;
    EXPECT_EQ(r.checks.size(), expected_threads);
  }

  utramp::test::TempDir tmp_{"utramp-stress-test"};
};

// The events of thread TID (of any process), or null when it has none.
const ThreadCheck* find(const Recorded& r, long tid) {
  for (const auto& [id, c] : r.checks)
    if (id.second == tid) return &c;
  return nullptr;
}

// Expected events of a thread whose calls are `m` (entries and exits each one event).
uint64_t events_of(const CallMap& m) {
  uint64_t n = 0;
  for (const auto& [f, c] : m) n += c.events();
  return n;
}

CallMap without(CallMap m, std::initializer_list<const char*> names) {
  for (const char* n : names) m.erase(n);
  return m;
}

// CHECK(k, events, want) for each thread k of the fixture's parent process, in order:
// its events and the calls it made. A thread without events ends the loop (a fatal
// failure); a fatal failure inside CHECK ends the checks of that thread only.
template <class Check>
void for_each_worker(const Recorded& r, Check check) {
  for (const auto& [k, tid] : r.tid_of) {
    SCOPED_TRACE("thread " + std::to_string(k));
    const ThreadCheck* c = find(r, tid);
    ASSERT_NE(c, nullptr);
    check(k, *c, expected_worker(r.load.scenario, k, r.load.iters));
  }
}

// A thread recorded without loss: every call as the fixture made it, FORKS fork events
// besides, nothing lost and no frame left open.
void expect_exact(const ThreadCheck& c, const CallMap& want, uint64_t forks = 0) {
  EXPECT_EQ(c.calls, want);
  EXPECT_EQ(c.lost, 0u);
  EXPECT_EQ(c.forks, forks);
  EXPECT_EQ(c.delivered, events_of(want) + forks);
  EXPECT_TRUE(c.open.empty());
}

// Every event the thread wrote was delivered or reported lost: those of the calls it
// made, and four (s_sig_outer and s_sig_leaf, entry and exit) per run of its handler.
void expect_accounted(const ThreadCheck& c, const CallMap& want, uint64_t handler_runs = 0) {
  EXPECT_EQ(c.delivered + c.lost, events_of(want) + 4 * handler_runs)
      << "delivered " << c.delivered << " lost " << c.lost << " handler runs " << handler_runs;
}

// 1a. Eight threads, a ring big enough for everything: exact counts, strict nesting,
// no loss at all.
TEST_P(StressTest, ThreadsExact) {
  const Recorded r = run({.scenario = Scenario::threads, .threads = 8, .iters = 4000},
                         {"--buffer-size", "131072"}, false);
  for_each_worker(r, [](int, const ThreadCheck& c, const CallMap& want) {
    expect_exact(c, want);
    EXPECT_GT(c.leaves, 0u) << "the fast path made no leaf";
  });
}

// 1b. The same load into 64-event rings in discard mode: most events are dropped, and
// every one of them is counted where it happened.
TEST_P(StressTest, ThreadsTinyRingAccounting) {
  const Recorded r = run({.scenario = Scenario::threads, .threads = 8, .iters = 4000},
                         {"--buffer-size", "64", "--mode", "discard"}, true);
  uint64_t lost = 0;
  for_each_worker(r, [&](int, const ThreadCheck& c, const CallMap& want) {
    expect_accounted(c, want);
    for (const auto& [f, calls] : c.calls) {
      ASSERT_TRUE(want.count(f)) << f;
      EXPECT_LE(calls.entries, want.at(f).entries) << f;
      EXPECT_LE(calls.exits, want.at(f).exits) << f;
    }
    lost += c.lost;
  });
  EXPECT_GT(lost, 0u) << "64-event rings lost nothing: the test tests nothing";
  EXPECT_NE(r.rec.err.find("buffers full: raise --buffer-size"), std::string::npos) << r.rec.err;
  // Where: each thread that lost events, with its count.
  EXPECT_TRUE(std::regex_search(r.rec.err, std::regex(R"(thread \d+/\d+: \d+ events lost, \d+ recorded)")))
      << r.rec.err;
}

// 1c. The same load into 64-event rings in block mode: the threads wait for the
// recorder instead of dropping, and every call is recorded (record --mode block).
TEST_P(StressTest, ThreadsTinyRingBlockModeLosesNothing) {
  const Recorded r = run({.scenario = Scenario::threads, .threads = 8, .iters = 4000},
                         {"--buffer-size", "64", "--mode", "block"}, false);
  for_each_worker(r, [](int, const ThreadCheck& c, const CallMap& want) { expect_exact(c, want); });
  EXPECT_EQ(r.rec.err.find("lost"), std::string::npos) << r.rec.err;
}

// 1c'. The same again at record's default mode: nothing is lost however small the
// rings (the default is block mode: a full ring makes its thread wait for the
// recorder), and info.json says which mode it was.
TEST_P(StressTest, ThreadsTinyRingDefaultLosesNothing) {
  const Recorded r = run({.scenario = Scenario::threads, .threads = 8, .iters = 4000},
                         {"--buffer-size", "64"}, false);
  for_each_worker(r, [](int, const ThreadCheck& c, const CallMap& want) { expect_exact(c, want); });
  EXPECT_EQ(r.rec.err.find("lost"), std::string::npos) << r.rec.err;
  auto reader = utramp::trace::TraceReader::open(r.dir);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  EXPECT_EQ(reader->info().buffer_mode, "block");
}

// 1d. Compressed and plain recordings of the same load hold the same events: 24
// threads, rings big enough, every call of every thread exactly as the fixture made it
// in both (the recorder's writing thread compresses while the drain goes on; the files
// say which kind they are).
TEST_P(StressTest, ManyThreadsCompressedAndPlainHoldTheSameCalls) {
  for (const char* compress : {"zstd", "none"}) {
    SCOPED_TRACE(compress);
    const Recorded r = run({.scenario = Scenario::threads, .threads = 24, .iters = 3000},
                           {"--buffer-size", "131072", "--compress", compress}, false);
    for_each_worker(r, [](int, const ThreadCheck& c, const CallMap& want) { expect_exact(c, want); });
    EXPECT_EQ(r.rec.err.find("lost"), std::string::npos) << r.rec.err;
    auto reader = utramp::trace::TraceReader::open(r.dir);
    ASSERT_TRUE(reader.ok());
    EXPECT_EQ(reader->info().compression, compress);
  }
}

// 1e. Block mode with compression: tiny rings, the threads wait for the recorder, which
// compresses on its own thread; nothing is lost.
TEST_P(StressTest, ThreadsTinyRingBlockModeCompressedLosesNothing) {
  const Recorded r = run({.scenario = Scenario::threads, .threads = 8, .iters = 4000},
                         {"--buffer-size", "64", "--mode", "block", "--compress", "zstd"}, false);
  for_each_worker(r, [](int, const ThreadCheck& c, const CallMap& want) { expect_exact(c, want); });
  EXPECT_EQ(r.rec.err.find("lost"), std::string::npos) << r.rec.err;
}

// Signals: the main calls stay exact; each handler call is either recorded, properly
// nested under whatever it interrupted, or counted lost with its exit (a handler that
// interrupts a write drops everything it writes until it returns). The number of
// handler calls recorded, per thread.
std::map<int, uint64_t> expect_signals_accounted(const Recorded& r) {
  std::map<int, uint64_t> recorded;
  uint64_t runs = 0, handler_lost = 0;
  for_each_worker(r, [&](int k, const ThreadCheck& c, const CallMap& want) {
    const uint64_t h = static_cast<uint64_t>(r.handler_runs.at(k));
    runs += h;
    EXPECT_EQ(without(c.calls, {"s_sig_outer", "s_sig_leaf"}), want);
    const Calls none;
    const Calls so = c.calls.count("s_sig_outer") ? c.calls.at("s_sig_outer") : none;
    const Calls sl = c.calls.count("s_sig_leaf") ? c.calls.at("s_sig_leaf") : none;
    // Recorded handler calls are whole (entry and exit), and whole ones are dropped.
    EXPECT_EQ(so.entries, so.exits);
    EXPECT_EQ(sl.entries, sl.exits);
    EXPECT_EQ(so.entries, sl.entries);
    EXPECT_LE(so.entries, h);
    expect_accounted(c, want, h);
    EXPECT_EQ(c.lost, 4 * (h - so.entries));
    handler_lost += c.lost;
    EXPECT_TRUE(c.open.empty());
    recorded[k] = so.entries;
  });
  // The ring is large: every loss is a handler's call inside the tracer, and the summary
  // says so instead of blaming the buffer size.
  if (r.summary_lost) {
    EXPECT_NE(r.rec.err.find("calls made by signal handlers that interrupted the tracer"),
              std::string::npos) << r.rec.err;
    EXPECT_EQ(r.rec.err.find("buffers full"), std::string::npos) << r.rec.err;
  }
  testing::Test::RecordProperty("handler_runs", std::to_string(runs));
  testing::Test::RecordProperty("handler_events_lost", std::to_string(handler_lost));
  EXPECT_GT(runs, 100u) << "too few signals to test anything";
  return recorded;
}

// 2a. A timer per thread fires every 20 us; its handler calls s_sig_outer -> s_sig_leaf.
TEST_P(StressTest, SignalsWhileTracing) {
  const Recorded r =
      run({.scenario = Scenario::signals, .threads = 4, .iters = 30000, .period_us = 20},
          {"--buffer-size", "1048576"}, false);
  expect_signals_accounted(r);
}

// 2b. The same with the handler on an alternate signal stack, above the thread's stack
// (odd threads) or below it (even ones). A handler's frames above the interrupted ones
// are not a longjmp over them: nothing is closed early, nothing nests wrong.
TEST_P(StressTest, SignalsOnAlternateStack) {
  const Recorded r =
      run({.scenario = Scenario::altstack, .threads = 4, .iters = 30000, .period_us = 50},
          {"--buffer-size", "1048576"}, false);
  const auto recorded = expect_signals_accounted(r);
  for (const auto& [k, n] : recorded)
    EXPECT_GT(n, 0u) << "thread " << k << ": no handler call recorded on its signal stack";
}

// 2c. The handler siglongjmps back to the worker's loop whenever it interrupted
// s_top(k, i): from any traced frame, and often from inside the tracer's own code (the
// inline path, the hooks, a ring write). The tracer finds the code it was left in at
// the thread's next call above it, repairs what it left half done and goes on: every
// later iteration is recorded, nesting stays exact (frames left by a jump exit by
// longjmp), and no event is garbage.
void expect_tracing_goes_on(const Recorded& r) {
  long jumps = 0;
  for_each_worker(r, [&](int k, const ThreadCheck& c, const CallMap& want) {
    ASSERT_TRUE(r.jumps.count(k)) << r.rec.out;
    const uint64_t j = static_cast<uint64_t>(r.jumps.at(k));
    jumps += r.jumps.at(k);
    const Calls none;
    const Calls top = c.calls.count("s_top") ? c.calls.at("s_top") : none;
    const uint64_t iters = want.at("s_top").entries;
    // An iteration's s_top is missing only when the jump left its entry hook.
    EXPECT_LE(top.entries, iters);
    EXPECT_GE(top.entries + j, iters) << "calls after a jump out of the tracer were dropped";
    EXPECT_LE(top.longjmp, j);
    EXPECT_LE(top.exits + top.longjmp, top.entries);
    EXPECT_GE(top.exits + top.longjmp + 1, top.entries);  // the last one may stay open
  });
  testing::Test::RecordProperty("jumps", std::to_string(jumps));
  EXPECT_GT(jumps, 20) << "too few jumps to test anything";
}

TEST_P(StressTest, SignalHandlersLongjmpOutOfTheTracer) {
  expect_tracing_goes_on(
      run({.scenario = Scenario::sigjump, .threads = 4, .iters = 30000, .period_us = 20},
          {"--buffer-size", "1048576"}, false));
}

// The same with -D 2: the calls below depth 2 take the general code without writing,
// above an entry the fast path staged; a jump out of them must not lose that entry.
TEST_P(StressTest, SignalHandlersLongjmpOutOfTheTracerWithDepthLimit) {
  expect_tracing_goes_on(
      run({.scenario = Scenario::sigjump, .threads = 4, .iters = 30000, .period_us = 20},
          {"--buffer-size", "1048576", "-D", "2"}, false));
}

// 3. Every thread forks from three traced frames deep while the others run: the child's
// stream starts with the inherited frames, its calls nest under them; the parent's
// stream has a fork event; both are exact.
TEST_P(StressTest, ForkFromTracedFrames) {
  const Recorded r = run({.scenario = Scenario::fork, .threads = 6, .iters = 2000},
                         {"--buffer-size", "131072"}, false);
  ASSERT_EQ(r.child_pid.size(), static_cast<size_t>(r.load.threads));
  for_each_worker(r, [&](int k, const ThreadCheck& c, const CallMap& want) {
    expect_exact(c, want, /*forks=*/1);
    // The child: its only thread has its pid as tid.
    const long child = r.child_pid.at(k);
    const ThreadCheck* cc = find(r, child);
    ASSERT_NE(cc, nullptr) << "child " << child << " has no events";
    EXPECT_EQ(cc->calls, expected_child());
    EXPECT_EQ(cc->lost, 0u);
    EXPECT_EQ(cc->open, (std::vector<std::string>{"s_top", "s_fork_a", "s_fork_b"}));
  });
}

// 4. Exceptions through traced frames (exits marked unwound) and longjmp over traced
// frames (exit_longjmp), in every thread, mixed with the fast path's ordinary calls;
// the first call after a longjmp nests under the frame longjmp returned to.
TEST_P(StressTest, ExceptionsAndLongjmp) {
  const Recorded r = run({.scenario = Scenario::unwind, .threads = 6, .iters = 1500},
                         {"--buffer-size", "262144"}, false);
  for_each_worker(r, [](int, const ThreadCheck& c, const CallMap& want) { expect_exact(c, want); });
}

// 5. The flight recorder: 64-event rings in overwrite mode under threads and signals.
// What is kept is well formed, and everything else is reported lost, exactly.
TEST_P(StressTest, FlightRecorderTinyRing) {
  const Recorded r =
      run({.scenario = Scenario::signals, .threads = 4, .iters = 20000, .period_us = 20},
          {"--buffer-size", "64", "--mode", "overwrite"}, true);
  uint64_t lost = 0;
  for_each_worker(r, [&](int k, const ThreadCheck& c, const CallMap& want) {
    expect_accounted(c, want, static_cast<uint64_t>(r.handler_runs.at(k)));
    EXPECT_EQ(c.leaves, 0u) << "overwrite mode makes no leaves";
    lost += c.lost;
  });
  EXPECT_GT(lost, 0u);
}

std::string fixture_name(const testing::TestParamInfo<StressFixture>& i) { return i.param.file; }

INSTANTIATE_TEST_SUITE_P(Record, StressTest, testing::ValuesIn(kFixtures), fixture_name);

}  // namespace
