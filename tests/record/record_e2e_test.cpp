// `utramp record` end to end: the fixtures of this directory (gcc and clang, -O0 and
// -O2, each site flavour and none) are recorded through the real CLI and agent, and
// what `record`, `replay`, `report` and `dump --folded --count` say is compared with
// goldens in tests/record/golden/ (UTRAMP_UPDATE_GOLDENS=1 rewrites them; a mismatch
// fails with a unified diff). Times, thread and process ids and addresses are masked.
//
// Every build of a scenario is compared with the same golden: the fixture is written so
// that its call tree does not depend on compiler or optimisation level. Threads are
// compared as per-thread reports, sorted, never as an interleaving.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "golden.hpp"
#include "temp_dir.hpp"
#include "trace/trace_dir.hpp"

namespace fs = std::filesystem;
using utramp::test::RunResult;

namespace {

struct Fixture {
  const char *file, *lang, *cc, *opt, *flavour, *missing;
};

void PrintTo(const Fixture& f, std::ostream* os) { *os << f.file; }

const Fixture kFixtures[] = {
#define REC_FIXTURE(file, lang, cc, opt, flavour, missing) {file, lang, cc, opt, flavour, missing},
#include "rec_matrix.inc"
#undef REC_FIXTURE
};

std::string fixture_path(const std::string& name) { return std::string(UTRAMP_REC_DIR) + "/" + name; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// This test's scratch directories: /tmp/utramp-record-test-XXXXXX.
struct TempDir : utramp::test::TempDir {
  TempDir() : utramp::test::TempDir("utramp-record-test") {}
};

// A child of these tests runs in the test's own directory (a -pg target writes
// gmon.out there) and never dumps core (the crash scenario).
RunResult run_in(const std::vector<std::string>& args, const std::string& cwd,
                 const std::string& stdin_path = "/dev/null") {
  return utramp::test::run_program(args, {.stdin_path = stdin_path, .cwd = cwd, .no_core = true});
}

// One recording: `utramp record -o DIR OPTS -- FIXTURE ARGS` run in a fresh directory,
// and the CLI's read side on it, rendered for goldens.
class Recording {
 public:
  Recording(const std::string& fixture, const std::vector<std::string>& opts,
            const std::vector<std::string>& target_args, const std::string& stdin_text = "")
      : fixture_(fixture_path(fixture)), dir_(tmp_.path + "/trace") {
    // The program's own functions: its library calls depend on the compiler and its
    // optimisation (printf or puts, strcmp inlined or not), and one golden serves every
    // build (library calls: libcall_e2e_test.cpp).
    args_ = {"record", "-o", dir_, "--no-libcall"};
    args_.insert(args_.end(), opts.begin(), opts.end());
    args_.push_back("--");
    args_.push_back(fixture_);
    args_.insert(args_.end(), target_args.begin(), target_args.end());
    std::string in = "/dev/null";
    if (!stdin_text.empty()) {
      in = tmp_.path + "/stdin.txt";
      std::ofstream(in) << stdin_text;
    }
    std::vector<std::string> argv = args_;
    argv.insert(argv.begin(), UTRAMP_CLI);
    record_ = run_in(argv, tmp_.path, in);
  }

  const RunResult& record() const { return record_; }
  const std::string& dir() const { return dir_; }
  const std::string& cwd() const { return tmp_.path; }

  // "$ utramp ARGS", the exit code, stdout and stderr (mask() the whole golden text at
  // once, so that ids are named alike in all its parts).
  std::string show(const std::vector<std::string>& args, const RunResult& r) const {
    std::string shown = "$ utramp";
    for (const auto& a : args) shown += " " + a;
    return shown + "\n--- exit " + std::to_string(r.exit_code) + "\n--- stdout\n" + r.out +
           "--- stderr\n" + r.err;
  }
  std::string show_record() const { return show(args_, record_); }

  // Runs the CLI on the trace: `utramp CMD [ARGS] DIR`.
  std::string cli(const std::vector<std::string>& args) const {
    std::vector<std::string> a = args;
    a.push_back(dir_);
    std::vector<std::string> argv = a;
    argv.insert(argv.begin(), UTRAMP_CLI);
    return show(a, run_in(argv, tmp_.path));
  }

  // Compares TEXT, masked, with the golden NAME.
  void expect_golden(const std::string& name, const std::string& text) const {
    utramp::test::expect_golden(name, mask(text));
  }

  std::string mask(std::string text) const {
    utramp::test::MaskOptions mo;
    mo.literal = {{dir_, "DIR"}, {fixture_, "FIXTURE"}, {" (core dumped)", ""}};
    mo.times = false;
    // The same id gets the same name in every part of a golden: the process record
    // started is T1, then the other threads and processes as info.json lists them.
    if (const uint32_t root = root_pid()) mo.known_ids.push_back(std::to_string(root));
    const auto inf = info();
    if (inf.contains("threads"))
      for (const auto& t : inf["threads"]) {
        mo.known_ids.push_back(std::to_string(t["pid"].get<uint32_t>()));
        mo.known_ids.push_back(std::to_string(t["tid"].get<uint32_t>()));
      }
    text = utramp::test::mask(mask_durations(text), mo);
    // Masked ids keep the width of the id, which depends on how high pids have got:
    // one width for all.
    static const std::regex col(R"(\[ *(T\d+)\])"), word(R"((--tid|--pid|child) +(T\d+))");
    text = std::regex_replace(text, col, "[ $1]");
    return std::regex_replace(text, word, "$1 $2");
  }

  // Real durations vary in digits and in unit ("210.312 ns", "  1.234 us"): each one,
  // with the spaces that right-align it, becomes "#.### ?s" right-aligned in the same
  // width, so columns stay where they were whatever the times were.
  static std::string mask_durations(const std::string& text) {
    static const std::regex dur(R"( *\d+\.\d{3} (ns|us|ms|s ))");
    std::string out;
    size_t pos = 0;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), dur);
         it != std::sregex_iterator(); ++it) {
      const size_t p = static_cast<size_t>(it->position(0)), n = static_cast<size_t>(it->length(0));
      out.append(text, pos, p - pos);
      out += std::string(n - 8, ' ') + "#.### ?s";
      pos = p + n;
    }
    out.append(text, pos, std::string::npos);
    return out;
  }

  nlohmann::json info() const {
    try {
      return nlohmann::json::parse(read_file(dir_ + "/info.json"));
    } catch (...) {
      return {};
    }
  }

  // The pid `record` started: not a forked child by its process-PID.json, else the
  // lowest pid.
  uint32_t root_pid() const {
    uint32_t root = 0;
    const auto inf = info();
    if (!inf.contains("threads")) return 0;
    for (const auto& t : inf["threads"]) {
      const uint32_t pid = t["pid"];
      nlohmann::json p;
      try {
        p = nlohmann::json::parse(read_file(dir_ + "/process-" + std::to_string(pid) + ".json"));
      } catch (...) {
      }
      if (p.is_object() && p.value("parent", 0u) != 0) continue;
      if (root == 0 || pid < root) root = pid;
    }
    return root;
  }

  std::vector<std::string> agent_logs() const {
    std::vector<std::string> logs;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().starts_with("agent-")
          && e.path().extension() == ".log")
        logs.push_back(read_file(e.path()));
    return logs;
  }

 private:
  TempDir tmp_;
  std::string fixture_, dir_;
  std::vector<std::string> args_;
  RunResult record_;
};

// Drops record's "has no compiler patch sites: N functions..." line, which only the
// `plain` builds print and whose N depends on the compiler (BadInput checks it).
std::string without_relocation_note(std::string s) {
  static const std::regex note(R"(utramp record: \S+ has no compiler patch sites[^\n]*\n)");
  return std::regex_replace(s, note, "");
}

// record, then replay, report by name and the folded stacks by call count.
std::string standard(const Recording& r, const std::vector<std::string>& replay_opts = {}) {
  std::vector<std::string> replay = {"replay"};
  replay.insert(replay.end(), replay_opts.begin(), replay_opts.end());
  return without_relocation_note(r.show_record()) + r.cli(replay) +
         r.cli({"report", "--sort", "name"}) + r.cli({"dump", "--folded", "--count"});
}

// Per-thread reports, sorted: which thread ran first does not matter.
std::string per_thread_reports(const Recording& r) {
  std::vector<std::string> parts;
  const auto info = r.info();
  for (const auto& t : info["threads"]) {
    const std::string tid = std::to_string(t["tid"].get<uint32_t>());
    std::string rep = r.mask(r.cli({"report", "--sort", "name", "--tid", tid}));
    rep = std::regex_replace(rep, std::regex("--tid \\w+"), "--tid TID");
    parts.push_back(rep);
  }
  std::sort(parts.begin(), parts.end());
  std::string out = without_relocation_note(r.show_record());
  for (const auto& p : parts) out += p;
  return out;
}

const Fixture* find_fixture(const std::string& name) {
  for (const auto& f : kFixtures)
    if (name == f.file) return &f;
  return nullptr;
}

#define REQUIRE_FIXTURE(name)                                                  \
  do {                                                                         \
    const Fixture* fx_ = find_fixture(name);                                   \
    ASSERT_NE(fx_, nullptr) << name;                                           \
    if (*fx_->missing) GTEST_SKIP() << name << " not built: " << fx_->missing; \
  } while (0)

// The fixture most single-purpose tests use.
constexpr const char* kMain = "rec_gcc_O2_pfe";

// ---- the matrix: every build of the C fixture, the same goldens ----

class Matrix : public testing::TestWithParam<Fixture> {
 protected:
  void SetUp() override {
    if (*GetParam().missing) GTEST_SKIP() << GetParam().file << " not built: " << GetParam().missing;
  }
  std::string fx() const { return GetParam().file; }
  // A -pg executable runs gcrt1's profiling start-up, which calls atexit() (linked
  // into the program from libc_nonshared.a, so traced) before main: its goldens are
  // those of the other builds plus that call.
  std::string golden(const std::string& scenario) const {
    return std::string(GetParam().flavour) == "fentry" ? scenario + "_pg" : scenario;
  }
};

// Nesting, recursion (fib(6): 25 calls) and exact counts.
TEST_P(Matrix, Basic) {
  Recording r(fx(), {}, {"basic"});
  EXPECT_EQ(r.record().exit_code, 0) << r.record().err;
  r.expect_golden(golden("basic"), standard(r));
}

// The same recordings with the tracer's common case done by the hooks (C) instead of
// inline in the images: both paths write the same trace. (Overwrite-mode tests always
// take the hooks; inline code is made for discard mode only.)
class NoInlineTracer {
 public:
  NoInlineTracer() { setenv("UTRAMP_NO_INLINE_TRACER", "1", 1); }
  ~NoInlineTracer() { unsetenv("UTRAMP_NO_INLINE_TRACER"); }
};

TEST_P(Matrix, BasicThroughTheHooks) {
  NoInlineTracer hooks;
  Recording r(fx(), {}, {"basic"});
  EXPECT_EQ(r.record().exit_code, 0) << r.record().err;
  r.expect_golden(golden("basic"), standard(r));
}

TEST_P(Matrix, LongjmpThroughTheHooks) {
  NoInlineTracer hooks;
  Recording r(fx(), {}, {"longjmp"});
  EXPECT_EQ(r.record().exit_code, 0) << r.record().err;
  r.expect_golden(golden("longjmp"), without_relocation_note(r.show_record()) + r.cli({"replay"}));
}

// -A/-R: integers, strings (short and longer than one 16-byte event), pointers.
TEST_P(Matrix, ArgsAndReturnValues) {
  Recording r(fx(),
              {"--only", "run_args", "--only", "add", "--only", "greet", "--only", "pick", "-A", "add@arg1,arg2",
               "-R", "add", "-A", "greet@arg1/s", "-R", "greet/s", "-A", "pick@arg1/x", "-R",
               "pick/x"},
              {"args"});
  EXPECT_EQ(r.record().exit_code, 0) << r.record().err;
  r.expect_golden(golden("args"), without_relocation_note(r.show_record()) + r.cli({"replay"}));
}

// -A/-R with DWARF: each value in its C type's width, sign and format (an int -1, a
// char, a float in xmm0, a double and an int counted apart: fparg1 and arg1), floating-
// point return values from xmm0.
const std::vector<std::string> kFargsOpts = {
    "--only", "run_fargs", "--only", "scale", "--only", "half", "--only", "neg", "--only", "upper", "--only", "mixed",
    "-A", "scale@fparg1,arg1", "-R", "scale", "-A", "half@arg1/f", "-R", "half",
    "-A", "neg@arg1,arg2", "-R", "neg", "-A", "upper@arg1", "-R", "upper",
    "-A", "mixed@arg1,fparg1,arg2/s,fparg2,arg1/x", "-R", "mixed"};

TEST_P(Matrix, TypedArgsAndReturnValues) {
  Recording r(fx(), kFargsOpts, {"fargs"});
  EXPECT_EQ(r.record().exit_code, 0) << r.record().err;
  const std::string replay = r.cli({"replay"});
  // The golden masks long hex numbers: an int's /x is its 32 bits.
  EXPECT_NE(replay.find(", 0xfffffffb) = 18446744073709551615;"), std::string::npos) << replay;
  r.expect_golden(golden("fargs"), without_relocation_note(r.show_record()) + replay);
}

// longjmp from j2 over j1 to jumper: both closed as skipped when jumper returns.
TEST_P(Matrix, Longjmp) {
  Recording r(fx(), {}, {"longjmp"});
  EXPECT_EQ(r.record().exit_code, 0) << r.record().err;
  r.expect_golden(golden("longjmp"), without_relocation_note(r.show_record()) + r.cli({"replay"}));
}

// SIGSEGV two frames deep: record exits 139, the trace is kept, replay says how it ended.
TEST_P(Matrix, Crash) {
  Recording r(fx(), {}, {"crash"});
  EXPECT_EQ(r.record().exit_code, 139) << r.record().err;
  EXPECT_EQ(r.info()["exit_code"], 139);
  r.expect_golden(golden("crash"), without_relocation_note(r.show_record()) + r.cli({"replay"}) +
                                           r.cli({"report", "--sort", "name"}));
}

// fork: the child is traced in the same trace; each process shown on its own.
TEST_P(Matrix, Fork) {
  Recording r(fx(), {}, {"fork"});
  EXPECT_EQ(r.record().exit_code, 0) << r.record().err;
  const uint32_t root = r.root_pid();
  std::vector<uint32_t> pids;
  const auto info = r.info();
  for (const auto& t : info["threads"]) pids.push_back(t["pid"]);
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  ASSERT_EQ(pids.size(), 2u) << r.info().dump();
  const uint32_t child = pids[0] == root ? pids[1] : pids[0];
  std::string out = without_relocation_note(r.show_record());
  out += r.cli({"replay", "--pid", std::to_string(root)});
  out += r.cli({"replay", "--pid", std::to_string(child)});
  r.expect_golden(golden("fork"), out);
}

// Three threads calling leaf() 10, 20 and 30 times: per-thread counts, sorted.
TEST_P(Matrix, Threads) {
  Recording r(fx(), {}, {"threads"});
  EXPECT_EQ(r.record().exit_code, 0) << r.record().err;
  ASSERT_EQ(r.info()["threads"].size(), 4u) << r.info().dump();
  r.expect_golden(golden("threads"), per_thread_reports(r));
}

std::vector<Fixture> c_fixtures() {
  std::vector<Fixture> v;
  for (const auto& f : kFixtures)
    if (std::string(f.lang) == "c") v.push_back(f);
  return v;
}

std::string fixture_name(const testing::TestParamInfo<Fixture>& i) { return i.param.file; }

INSTANTIATE_TEST_SUITE_P(C, Matrix, testing::ValuesIn(c_fixtures()), fixture_name);

// ---- C++: an exception through traced frames ----

class CxxMatrix : public Matrix {};

TEST_P(CxxMatrix, Exception) {
  Recording r(fx(), {}, {});
  EXPECT_EQ(r.record().exit_code, 0) << r.record().err;
  EXPECT_EQ(r.record().out, "total 7, caught 1\n");
  r.expect_golden("cxx_exception", standard(r));
}

std::vector<Fixture> cxx_fixtures() {
  std::vector<Fixture> v;
  for (const auto& f : kFixtures)
    if (std::string(f.lang) == "cxx") v.push_back(f);
  return v;
}

// Names through record and replay (docs/tracing.md, "Function names and globs"): -F in
// each of a name's three forms selects the same functions at record time as at replay
// time; replay shows simple names by default, full ones with --demangle full, and the
// symbols with --no-demangle (from the trace: the symbol file holds them).
TEST_P(CxxMatrix, NamesOneRule) {
  const std::vector<std::string> filters = {
      "--only", "shop::run_names",                                        // simple
      "--only", "shop::Box<int>::operator<(shop::Box<int> const&) const", // full
      "--only", "_ZNK4shop3BoxIiEclEi",                                   // symbol
      "--only", "shop::Box::g*",                                          // glob on simple
      "--only", "*hidden(int)",                                           // glob on full
      "--only", "shop::label"};                                           // [abi:cxx11] dropped
  Recording r(fx(), filters, {"names"});
  EXPECT_EQ(r.record().exit_code, 0) << r.record().err;
  std::vector<std::string> replay_f = {"replay"};
  for (size_t k = 1; k < filters.size(); k += 2) {
    replay_f.push_back("-F");
    replay_f.push_back(filters[k]);
  }
  r.expect_golden("cxx_names", r.show_record() + r.cli({"replay"}) +
                                   r.cli({"replay", "--demangle", "full"}) +
                                   r.cli({"replay", "--no-demangle"}) + r.cli(replay_f) +
                                   r.cli({"report", "--sort", "name"}));
}

INSTANTIATE_TEST_SUITE_P(Cxx, CxxMatrix, testing::ValuesIn(cxx_fixtures()), fixture_name);

// C functions named as manglings of types (`a` is `signed char`, `f` `float`...) are
// shown, listed and matched by their names.
TEST(Names, CFunctionsAreNeverDemangled) {
  REQUIRE_FIXTURE(kMain);
  Recording r(kMain, {"--only", "run_names", "--only", "[abcdfi]", "--only", "_Zap"}, {"names"});
  EXPECT_EQ(r.record().exit_code, 0) << r.record().err;
  std::vector<std::string> list = {"list", fixture_path(kMain), "[abcdfi]"};
  std::vector<std::string> argv = list;
  argv.insert(argv.begin(), UTRAMP_CLI);
  const RunResult listed = run_in(argv, r.cwd());
  r.expect_golden("c_names", r.show_record() + r.cli({"replay"}) +
                                 r.cli({"replay", "--demangle", "full"}) +
                                 r.cli({"report", "--sort", "name"}) + r.show(list, listed));
}

// ---- arguments ----

// Without DWARF the formats decide: a width cuts the register's value (and a signed one
// sign-extends it), argN/f and fpargN read xmm registers, -R .../f reads xmm0.
TEST(Args, FormatsWithoutDwarf) {
  if (std::string(UTRAMP_REC_NODWARF).empty()) GTEST_SKIP() << "no gcc or objcopy: no build without DWARF";
  Recording r(fs::path(UTRAMP_REC_NODWARF).filename().string(),
              {"--only", "run_fargs", "--only", "scale", "--only", "half", "--only", "neg", "--only", "upper",
               "-A", "scale@arg1/f,arg1", "-R", "scale/f64", "-A", "half@fparg1/f32", "-R", "half/f32",
               "-A", "neg@arg1/i32,arg2/i16,arg1/u8,arg1/x16,retval/i32", "-A", "upper@arg1/c",
               "-R", "upper/c"},
              {"fargs"});
  EXPECT_EQ(r.record().exit_code, 0) << r.record().err;
  r.expect_golden("fargs_nodwarf", without_relocation_note(r.show_record()) + r.cli({"replay"}));
}

// A format or an argument that is not one of uftrace's is refused before the program
// runs, naming what is accepted.
TEST(Args, UnknownFormatsAreRefused) {
  REQUIRE_FIXTURE(kMain);
  const std::vector<std::vector<std::string>> bad = {
      {"-A", "add@arg1/q"}, {"-A", "add@arg1/d12"}, {"-R", "add/s8"},      {"-A", "add@fparg9"},
      {"-A", "add@fparg1/d"}, {"-A", "add@retval/"}, {"-A", "add@arg0"}, {"-R", "add/f16"}};
  for (const auto& opts : bad) {
    Recording r(kMain, opts, {"args"});
    EXPECT_EQ(r.record().exit_code, 2) << opts[1];
    EXPECT_EQ(r.record().out, "") << opts[1];
    EXPECT_NE(r.record().err.find(opts[1].substr(opts[1].find('@') + 1)), std::string::npos) << r.record().err;
    if (opts[1].find("/q") != std::string::npos || opts[1].find("/s8") != std::string::npos) {
      EXPECT_NE(r.record().err.find("d i u x s c f, or d i u x with a width"), std::string::npos)
          << r.record().err;
    }
  }
}

// ---- uftrace's commands and options ----

// Durations, ids and addresses masked, for output that has no trace directory left.
std::string masked(const std::string& text) {
  utramp::test::MaskOptions mo;
  mo.times = false;
  return utramp::test::mask(Recording::mask_durations(text), mo);
}

// `utramp live` and `utramp PROGRAM` show what record then replay show, leave nothing in
// $TMPDIR, and exit with the program's status; a subcommand's name is never a program.
TEST(Uftrace, LiveIsRecordThenReplay) {
  REQUIRE_FIXTURE(kMain);
  // Recorded with record's defaults (library calls too), as live and `utramp PROG` do.
  TempDir rec_dir;
  const std::string dir = rec_dir.path + "/d";
  const RunResult rec = run_in({UTRAMP_CLI, "record", "-q", "-o", dir, "--", fixture_path(kMain), "basic"},
                               rec_dir.path);
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  const RunResult replay = run_in({UTRAMP_CLI, "replay", dir}, rec_dir.path);
  TempDir tmp;
  setenv("TMPDIR", tmp.path.c_str(), 1);
  const RunResult live = run_in({UTRAMP_CLI, "live", "--", fixture_path(kMain), "basic"}, rec_dir.path);
  const RunResult bare = run_in({UTRAMP_CLI, fixture_path(kMain), "basic"}, rec_dir.path);
  const RunResult io = run_in({UTRAMP_CLI, fixture_path(kMain), "io"}, rec_dir.path);
  unsetenv("TMPDIR");
  EXPECT_EQ(live.exit_code, 0) << live.err;
  EXPECT_EQ(masked(live.out), masked(replay.out));
  EXPECT_EQ(bare.exit_code, 0) << bare.err;
  EXPECT_EQ(masked(bare.out), masked(replay.out));
  EXPECT_EQ(io.exit_code, 3) << io.err;  // run_io: exit 3, a line to stderr
  EXPECT_NE(io.err.find("read 0 bytes"), std::string::npos) << io.err;
  EXPECT_TRUE(fs::is_empty(tmp.path)) << "left in TMPDIR: " << fs::directory_iterator(tmp.path)->path();
  const RunResult sub = run_in({UTRAMP_CLI, "info", "/nonexistent-dir"}, rec_dir.path);
  EXPECT_NE(sub.err.find("utramp info: /nonexistent-dir"), std::string::npos) << sub.err;
}

// info, graph, and replay's -f, --time-range and --no-pager.
TEST(Uftrace, InfoGraphAndReplayColumns) {
  REQUIRE_FIXTURE(kMain);
  Recording r(kMain, {}, {"basic"});
  ASSERT_EQ(r.record().exit_code, 0) << r.record().err;
  std::string info = r.cli({"info"});
  static const std::regex build_id(R"(build id      : [0-9a-f]{40})"), date(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)");
  EXPECT_TRUE(std::regex_search(info, build_id)) << info;
  info = std::regex_replace(std::regex_replace(info, build_id, "build id      : BUILD-ID"), date, "DATE");
  // Masked ids keep the ids' widths: the thread's line is checked apart.
  static const std::regex thread(R"(#   thread \d+/\d+: 68 events, 0 lost\n)");
  EXPECT_TRUE(std::regex_search(info, thread)) << info;
  info = std::regex_replace(info, thread, "");
  const std::string full = r.cli({"replay"});
  std::string text = info + r.cli({"graph", "run_basic"}) + r.cli({"graph", "fib"}) +
                     r.cli({"replay", "--no-pager", "-f", "none"}) + r.cli({"replay", "-f", "tid,addr"}) +
                     r.cli({"replay", "--time-range", "0~1ns"}) + r.cli({"graph", "nothing_named_so"}) +
                     r.cli({"replay", "-f", "duration,bogus"}) + r.cli({"replay", "--time-range", "2ms"});
  r.expect_golden("uftrace_cli", text);
  // All of the recording is in 0~ (times since it started); -f with the clock columns
  // shows times that never go back.
  std::string all = r.cli({"replay", "--time-range", "0~"});
  EXPECT_EQ(all.substr(all.find('\n')), full.substr(full.find('\n')));
  const std::string timed = r.cli({"replay", "-f", "time,elapsed,delta"});
  std::istringstream lines(timed.substr(timed.find("--- stdout\n") + 11));
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line, "#     TIMESTAMP    ELAPSED      DELTA   FUNCTION");
  double last = 0;
  int n = 0;
  while (std::getline(lines, line) && line != "--- stderr") {
    const double t = std::stod(line);
    EXPECT_GE(t, last) << line;
    last = t;
    ++n;
  }
  EXPECT_GT(n, 20) << timed;
}

// Deeper than the tracer's stack (2048 frames a thread): the calls below are counted and
// shown where they were, never cut silently.
TEST(Uftrace, DepthLimitIsReported) {
  REQUIRE_FIXTURE(kMain);
  Recording r(kMain, {"-F", "dive"}, {"deep", "2100"});
  ASSERT_EQ(r.record().exit_code, 0) << r.record().err;
  const std::string replay = r.cli({"replay"});
  EXPECT_NE(replay.find("/* 52 calls below the depth limit not recorded */"), std::string::npos)
      << replay.substr(0, 2000);
  const std::string report = r.cli({"report"});
  EXPECT_NE(report.find("  2048  dive"), std::string::npos) << report;
  EXPECT_NE(report.find("not recorded: 52"), std::string::npos) << report;
}

// ---- filters ----

TEST(Filters, OnlyAndSkip) {
  REQUIRE_FIXTURE(kMain);
  // --only: these functions alone (not what they call): nest_* and leaf; --skip fib wins
  // over --only fib. (uftrace's -F and -N: tests/uftrace, UftraceFilters.)
  Recording r(kMain, {"--only", "nest_*", "--only", "leaf", "--only", "fib", "--skip", "fib"}, {"basic"});
  EXPECT_EQ(r.record().exit_code, 0);
  r.expect_golden("filter_only_skip", standard(r));
}

TEST(Filters, Depth) {
  REQUIRE_FIXTURE(kMain);
  Recording r(kMain, {"-D", "2"}, {"basic"});
  EXPECT_EQ(r.record().exit_code, 0);
  r.expect_golden("filter_D", standard(r));
}

TEST(Filters, Time) {
  REQUIRE_FIXTURE(kMain);
  // slow() sleeps 20 ms; leaf() takes nanoseconds: only slow() and its callers stay.
  Recording r(kMain, {"-t", "5ms"}, {"slow"});
  EXPECT_EQ(r.record().exit_code, 0);
  r.expect_golden("filter_t", standard(r));
}

TEST(Filters, GlobMatchingNothingStillRuns) {
  REQUIRE_FIXTURE(kMain);
  Recording r(kMain, {"-F", "no_such_fn*"}, {"basic"});
  EXPECT_EQ(r.record().exit_code, 0);
  r.expect_golden("filter_nothing", standard(r));
}

TEST(Filters, FunctionTracer) {
  REQUIRE_FIXTURE(kMain);
  Recording r(kMain, {"--tracer", "function", "--only", "nest_*"}, {"basic"});
  EXPECT_EQ(r.record().exit_code, 0);
  r.expect_golden("function_tracer",
                              r.show_record() + r.cli({"replay"}) + r.cli({"report", "--sort", "name"}));
}

// The function tracer on a function whose arguments are recorded: the program path
// (not the tracer's hooks), which reads the caller from the image's ctx.
TEST(Filters, FunctionTracerWithArguments) {
  REQUIRE_FIXTURE(kMain);
  Recording r(kMain, {"--tracer", "function", "--only", "add", "--only", "run_args", "-A", "add@arg1,arg2"},
              {"args"});
  EXPECT_EQ(r.record().exit_code, 0);
  const std::string replay = r.cli({"replay"});
  EXPECT_NE(replay.find("add() <- run_args"), std::string::npos) << replay;
}

// ---- buffers: a forced overflow in both modes is reported, never silent ----

void check_overflow(const std::string& mode) {
  REQUIRE_FIXTURE(kMain);
  constexpr long kCalls = 200000;
  Recording r(kMain, {"--buffer-size", "64", "--mode", mode, "--only", "leaf", "--only", "run_many"},
              {"many", std::to_string(kCalls)});
  ASSERT_EQ(r.record().exit_code, 0) << r.record().err;
  // record's summary says how many were lost.
  std::smatch m;
  const std::regex summary(R"(utramp: (\d+) events recorded in .*; target exited 0; (\d+) events lost)");
  ASSERT_TRUE(std::regex_search(r.record().err, m, summary)) << r.record().err;
  const uint64_t delivered = std::stoull(m[1]), lost = std::stoull(m[2]);
  EXPECT_GT(lost, 0u);
  // Every event is accounted for: run_many and leaf, entry and exit each.
  const auto info = r.info();
  ASSERT_EQ(info["threads"].size(), 1u);
  EXPECT_EQ(info["threads"][0]["lost"].get<uint64_t>(), lost);
  EXPECT_EQ(info["buffer_mode"], mode);
  // Every event written (run_many and each leaf, entry and exit) was either delivered
  // or counted lost: the summary's count excludes the `lost` markers.
  EXPECT_EQ(delivered + lost, 2u * (kCalls + 1)) << "delivered " << delivered << " lost " << lost;
  // replay shows where: "<lost N events>" markers summing to the loss.
  const std::string replay = r.cli({"replay"});
  uint64_t marked = 0;
  const std::regex marker(R"(<lost (\d+) events?>)");
  for (auto it = std::sregex_iterator(replay.begin(), replay.end(), marker);
       it != std::sregex_iterator(); ++it)
    marked += std::stoull((*it)[1]);
  EXPECT_EQ(marked, lost);
  const std::string report = r.cli({"report", "--sort", "name"});
  EXPECT_NE(report.find("leaf"), std::string::npos) << report;
}

TEST(Buffers, DiscardOverflowIsReported) { check_overflow("discard"); }
TEST(Buffers, OverwriteOverflowIsReported) { check_overflow("overwrite"); }

// ---- the target's stdin, stdout, stderr and exit code pass through ----

TEST(PassThrough, StdioAndExitCode) {
  REQUIRE_FIXTURE(kMain);
  const std::string text = "first line\nsecond line\n";
  Recording r(kMain, {"-q"}, {"io"}, text);
  EXPECT_EQ(r.record().exit_code, 3);
  EXPECT_EQ(r.record().out, text);
  EXPECT_EQ(r.record().err, "read 23 bytes\n");  // -q: nothing of ours
  // Untraced, the same.
  TempDir t;
  std::ofstream(t.path + "/in") << text;
  const RunResult plain = run_in({fixture_path(kMain), "io"}, t.path, t.path + "/in");
  EXPECT_EQ(plain.exit_code, 3);
  EXPECT_EQ(plain.out, r.record().out);
  EXPECT_EQ(plain.err, r.record().err);
}

// ---- SIGTRAP stays deliverable ----

// Threads that block SIGTRAP (pthread_sigmask, sigprocmask) while the function they call
// is probed and re-patched, a program SIGTRAP handler, a handler mask holding SIGTRAP:
// see sigtrap_fixture.c. Under the agent the process survives and utramp's traps and the
// program's reach their handlers; alone, the kernel kills it (which shows the fixture
// does block SIGTRAP where it traps).
TEST(Signals, SigtrapStaysDeliverable) {
  const char* name = "rec_sigtrap";
  TempDir alone;
  const RunResult plain = run_in({fixture_path(name)}, alone.path);
  EXPECT_EQ(plain.exit_code, 128 + SIGTRAP) << plain.out << plain.err;

  Recording r(name, {"--only", "main"}, {});
  EXPECT_EQ(r.record().exit_code, 0) << r.record().err;
  EXPECT_EQ(r.record().out,
            "blocked threads survived 200 probe attachments\n"
            "mask read back shows SIGTRAP: sigprocmask 1, pthread_sigmask 1\n"
            "probe hits in blocked threads: yes\n"
            "after the program's own SIGTRAP handler: sigaction reports it yes, probe hits 2, "
            "program handler ran 1, probed in a SIGUSR1 handler yes\n");
}

// ---- the trace directory as a recording leaves it ----

// Each traced process's files (docs/trace-format.md), written by its agent with the trace
// module's writer: the symbols as in the object; the process files with parent, command,
// start, and the end where it is known (record reaps the process it started; the forked
// child calls exit(5), which its agent sees). Owner-only.
TEST(TraceFiles, WhatARecordingLeaves) {
  REQUIRE_FIXTURE(kMain);
  Recording r(kMain, {}, {"fork_exit"});
  ASSERT_EQ(r.record().exit_code, 0) << r.record().err;
  const uint32_t root = r.root_pid();
  ASSERT_NE(root, 0u);

  std::string files;
  for (const auto& e : fs::directory_iterator(r.dir())) {
    const std::string n = e.path().filename();
    files += n + "\n";
    if (n.starts_with("functions-") || n.starts_with("maps-") || n.starts_with("process-") ||
        n.starts_with("agent-")) {
      struct stat st {};
      ASSERT_EQ(stat(e.path().c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 0777, 0600u) << n;
    }
  }
  // Sorted once masked: the order of real ids varies.
  std::vector<std::string> masked;
  std::istringstream fl(r.mask(files));
  for (std::string line; std::getline(fl, line);) masked.push_back(line);
  std::sort(masked.begin(), masked.end());
  std::string out = "--- files\n";
  for (const auto& f : masked) out += f + "\n";

  // The root's symbol file: names as in the object, sorted; addresses and sizes checked
  // here (they depend on the build), not shown.
  std::istringstream tsv(read_file(r.dir() + "/functions-" + std::to_string(root) + ".tsv"));
  std::vector<std::string> fns;
  std::string header;
  std::getline(tsv, header);
  for (std::string line; std::getline(tsv, line);) {
    std::istringstream ls(line);
    std::string addr, size, name, object;
    std::getline(ls, addr, '\t');
    std::getline(ls, size, '\t');
    std::getline(ls, name, '\t');
    std::getline(ls, object);
    EXPECT_TRUE(addr.starts_with("0x") && std::stoull(addr, nullptr, 16) != 0) << line;
    EXPECT_GT(std::stoull(size), 0u) << line;
    fns.push_back(name + "\t" + r.mask(object));
  }
  std::sort(fns.begin(), fns.end());
  out += "--- functions-T1.tsv\n" + header + "\n";
  for (const auto& f : fns) out += f + "\n";

  // The process files, times checked against the events rather than shown.
  auto reader = utramp::trace::TraceReader::open(r.dir());
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  ASSERT_EQ(reader->processes().size(), 2u);
  for (const auto& [pid, p] : reader->processes()) {
    out += "--- process-" + std::to_string(pid) + ".json: parent=" + std::to_string(p.parent) +
           ", exit=\"" + p.exit + "\", command=";
    for (const auto& a : p.command) out += a + ";";
    out += "\n";
    EXPECT_GE(p.start_time, reader->info().start_time) << pid;
    // A forked child's events begin with the frames it inherited, entered before the
    // fork: its own calls begin with child_work.
    const std::string first_own = p.parent ? "child_work" : "main";
    uint64_t first = 0, last = 0;
    for (auto [epid, tid] : reader->threads()) {
      if (epid != pid) continue;
      auto st = reader->stream(epid, tid);
      while (auto e = st->next()) {
        const auto* fn = reader->symbols(pid).find(e->addr);
        if (!first && e->type == static_cast<uint8_t>(utramp::trace::EventType::entry) && fn &&
            fn->name == first_own)
          first = e->time;
        last = std::max(last, e->time);
      }
    }
    ASSERT_NE(first, 0u) << "no call of " << first_own << " in " << pid;
    EXPECT_LE(p.start_time, first) << pid;
    EXPECT_GE(p.end_time, last) << pid;
  }
  r.expect_golden("trace_files", r.mask(out));
}

// ---- bad input ----

TEST(BadInput, MissingProgram) {
  TempDir t;
  const RunResult r = run_in({UTRAMP_CLI, "record", "-o", t.path + "/trace", "--",
                              "/nonexistent/program"},
                             t.path);
  utramp::test::MaskOptions mo;
  mo.literal = {{t.path, "TMP"}};
  utramp::test::expect_golden(
      "bad_missing_program",
      utramp::test::mask("--- exit " + std::to_string(r.exit_code) + "\n--- stdout\n" + r.out +
                             "--- stderr\n" + r.err,
                         mo));
}

TEST(BadInput, NotExecutable) {
  TempDir t;
  const std::string file = t.path + "/data.txt";
  std::ofstream(file) << "not a program\n";
  chmod(file.c_str(), 0644);
  const RunResult r = run_in({UTRAMP_CLI, "record", "-o", t.path + "/trace", "--", file}, t.path);
  utramp::test::MaskOptions mo;
  mo.literal = {{t.path, "TMP"}};
  utramp::test::expect_golden(
      "bad_not_executable",
      utramp::test::mask("--- exit " + std::to_string(r.exit_code) + "\n--- stdout\n" + r.out +
                             "--- stderr\n" + r.err,
                         mo));
}

// A program without any compiler site: traced by prologue relocation, with what could
// not be relocated listed in DIR/agent-PID.log.
TEST(BadInput, NoSitesRelocated) {
  const char* name = "rec_gcc_O2_plain";
  REQUIRE_FIXTURE(name);
  Recording r(name, {}, {"basic"});
  EXPECT_EQ(r.record().exit_code, 0);
  EXPECT_NE(r.record().err.find("has no compiler patch sites"), std::string::npos) << r.record().err;
  EXPECT_NE(r.record().err.find("agent-*.log"), std::string::npos) << r.record().err;
  const auto logs = r.agent_logs();
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_NE(logs[0].find("skipped tiny_asm: "), std::string::npos) << logs[0];
  EXPECT_NE(r.cli({"report", "--sort", "name"}).find(" fib\n"), std::string::npos);
}

// A damaged trace directory: replay says what is wrong and shows what it can.
// record --compress zstd: replay and report read the compressed events files as they
// read plain ones (the same text), and the files say they are compressed.
TEST(Compress, ZstdFilesReadAsPlainOnes) {
  REQUIRE_FIXTURE(kMain);
  Recording plain(kMain, {"--compress", "none"}, {"basic"});
  Recording zstd(kMain, {"--compress", "zstd"}, {"basic"});
  ASSERT_EQ(plain.record().exit_code, 0);
  ASSERT_EQ(zstd.record().exit_code, 0);
  // The command lines differ only in the trace directory, which mask() hides.
  EXPECT_EQ(zstd.mask(zstd.cli({"replay"})), plain.mask(plain.cli({"replay"})));
  EXPECT_EQ(zstd.mask(zstd.cli({"report", "--sort", "name"})),
            plain.mask(plain.cli({"report", "--sort", "name"})));
  auto reader = utramp::trace::TraceReader::open(zstd.dir());
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  EXPECT_EQ(reader->info().compression, "zstd");
  EXPECT_TRUE(reader->warnings().empty());
  for (const auto& e : fs::directory_iterator(zstd.dir()))
    if (e.path().filename().string().starts_with("events-")) {
      utramp::trace::EventFileHeader h{};
      std::ifstream(e.path(), std::ios::binary).read(reinterpret_cast<char*>(&h), sizeof h);
      EXPECT_EQ(h.flags, utramp::trace::kEventFileZstd) << e.path();
    }
}

TEST(BadInput, CorruptTraceDir) {
  REQUIRE_FIXTURE(kMain);
  // Plain records, cut in the middle of one (compressed files: unit_trace_dir, TraceDirZstd).
  Recording r(kMain, {"--compress", "none"}, {"basic"});
  ASSERT_EQ(r.record().exit_code, 0);
  std::string events;
  for (const auto& e : fs::directory_iterator(r.dir()))
    if (e.path().filename().string().starts_with("events-")) events = e.path();
  ASSERT_FALSE(events.empty());
  // Cut the last 20 events and a half record; break info.json.
  const auto size = fs::file_size(events);
  fs::resize_file(events, size - 20 * 32 - 17);
  std::ofstream(r.dir() + "/info.json", std::ios::trunc) << "{\"format\": \"utramp-tr";
  r.expect_golden("corrupt_dir", r.cli({"replay"}) + r.cli({"report", "--sort", "name"}));
  // Not a trace at all.
  TempDir empty;
  const RunResult e = run_in({UTRAMP_CLI, "replay", empty.path}, empty.path);
  EXPECT_NE(e.exit_code, 0);
  EXPECT_FALSE(e.err.empty());
}

}  // namespace
