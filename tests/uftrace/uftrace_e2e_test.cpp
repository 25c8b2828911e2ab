// The uftrace-style suite (tests/uftrace/CMakeLists.txt): each small program, built as
// uftrace users build programs to trace (-pg, -pg -mfentry, -fpatchable-function-entry,
// -finstrument-functions; -O0 and -O2), is recorded and replayed through the real CLI
// and agent, and the replay must be the program's one expected text
// (golden/<program>.txt): the way a program was built must not show in what is traced.
// The untraced program's exit code and output must be the traced one's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "golden.hpp"
#include "temp_dir.hpp"

using utramp::test::RunResult;

namespace {

struct Program {
  const char *file, *program, *flavour, *missing;
};

void PrintTo(const Program& p, std::ostream* os) { *os << p.file; }

const Program kPrograms[] = {
#define UFT_PROGRAM(file, program, flavour, missing) {file, program, flavour, missing},
#include "uft_matrix.inc"
#undef UFT_PROGRAM
};

// Children run in the scratch directory: a -pg program writes gmon.out there.
RunResult run_in(const std::vector<std::string>& args, const std::string& cwd) {
  return utramp::test::run_program(args, {.cwd = cwd, .no_core = true});
}

// Durations vary in digits and unit: the column becomes one placeholder.
std::string mask_replay(const std::string& text, const std::string& dir) {
  utramp::test::MaskOptions mo;
  mo.literal = {{dir, "DIR"}};
  mo.times = false;
  static const std::regex dur(R"( *\d+\.\d{3} (ns|us|ms|s ) \[)");
  std::string t = std::regex_replace(text, dur, "  #.### ?s [");
  t = utramp::test::mask(t, mo);
  // Masked ids keep the width of the id, which depends on how high pids have got.
  static const std::regex col(R"(\[ *(T\d+)\])"), child(R"(child +(T\d+))");
  return std::regex_replace(std::regex_replace(t, col, "[ $1]"), child, "child $1");
}

// Processes or threads run at once (a forked child and its parent, a thread and the one
// waiting for it): each one's lines in their order, one after the other (in order of
// their first line).
std::string by_thread(const std::string& text) {
  std::vector<std::string> order;
  std::map<std::string, std::string> lines;
  std::string head;
  std::istringstream in(text);
  static const std::regex tid(R"(\[ (T\d+)\])");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, tid)) {
      head += line + "\n";
      continue;
    }
    if (!lines.count(m[1])) order.push_back(m[1]);
    lines[m[1]] += line + "\n";
  }
  for (const auto& t : order) head += lines[t];
  // A call whose entry and exit are adjacent in its own thread is shown as `f() {`, `}`
  // or as `f();` depending on whether another process's line fell between them in time:
  // one form here.
  // Likewise replay names the function at a closing brace far from its opening line,
  // which other threads' lines can make far.
  static const std::regex named(R"(\} /\* [A-Za-z_][A-Za-z0-9_:~]* \*/\n)");
  head = std::regex_replace(head, named, "}\n");
  static const std::regex split(R"( *\[ (T\d+)\] \|( +)(\S+)\(\) \{\n  #\.### \?s \[ \1\] \|\2\}[^\n]*\n)");
  return std::regex_replace(head, split, "  #.### ?s [ $1] |$2$3();\n");
}

class Uftrace : public ::testing::TestWithParam<Program> {
 protected:
  void SetUp() override {
    if (*GetParam().missing) GTEST_SKIP() << GetParam().file << " not built: " << GetParam().missing;
  }
};

// Records the program (with its library calls or without), checks that it ran as
// untraced, and compares the replay with the expected text GOLDEN (a -finstrument-
// functions build of `exception` has its own: see below).
void record_and_compare(const Program& p, bool libcalls) {
  utramp::test::TempDir tmp("utramp-uftrace-test");
  const std::string exe = std::string(UTRAMP_UFT_DIR) + "/" + p.file;
  const std::string dir = tmp.path + "/trace";
  const RunResult plain = run_in({exe}, tmp.path);
  // atexit: gcrt1 (-pg) registers its gmon.out writer with it, and it is linked into
  // the program (libc_nonshared.a): not the program's own call. Nor are the -pg start-up
  // and exit's profiling calls (__monstartup, __cxa_atexit for it, _mcleanup), which
  // uftrace shows too, before and after main: left out so that every build has one text.
  std::vector<std::string> cmd = {UTRAMP_CLI, "record", "-o", dir, "-N", "atexit"};
  if (libcalls)
    cmd.insert(cmd.end(), {"-N", "__monstartup", "-N", "__cxa_atexit", "-N", "_mcleanup"});
  else
    cmd.push_back("--no-libcall");
  // The programs that run themselves again in a new process (exec after vfork,
  // posix_spawn): as uftrace follows them by default, so does this record.
  const std::string program = p.program;
  const bool execs = program == "vfork" || program == "spawn";
  if (execs) cmd.push_back("--follow-exec");
  cmd.insert(cmd.end(), {"--", exe});
  const RunResult rec = run_in(cmd, tmp.path);
  ASSERT_EQ(rec.exit_code, plain.exit_code) << rec.err;
  EXPECT_EQ(rec.out, plain.out);
  EXPECT_NE(rec.err.find("events recorded"), std::string::npos) << rec.err;
  // Seen the way the build meant: through the mcount calls of a -pg build, through
  // the reports of a -finstrument-functions one (a relocated prologue would give the
  // same replay).
  const std::string flavour = p.flavour;
  if (flavour == "pg") {
    const RunResult list = run_in({UTRAMP_CLI, "list", exe, "main"}, tmp.path);
    EXPECT_NE(list.out.find(" mcount "), std::string::npos) << list.out << list.err;
  }
  if (flavour == "cyg") {
    std::string log;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().filename().string().starts_with("agent-")) {
        std::ifstream in(e.path());
        log += std::string(std::istreambuf_iterator<char>(in), {});
      }
    EXPECT_NE(log.find("report their calls (-finstrument-functions)"), std::string::npos) << log;
  }
  const RunResult replay = run_in({UTRAMP_CLI, "replay", dir}, tmp.path);
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  const std::string shown = mask_replay(replay.out, dir);
  // -finstrument-functions reports the exits of the frames an exception unwinds itself
  // (its cleanups call __cyg_profile_func_exit): they are closed as returns, not as
  // "unwound by exception" — a text of its own.
  std::string golden = program == "exception" && flavour == "cyg" ? "exception_cyg" : program;
  if (libcalls) golden += ".libcall";
  const bool processes = program == "fork" || program == "thread" || program == "filter" || execs;
  utramp::test::expect_golden(golden, processes ? by_thread(shown) : shown);
}

// The program's own calls (--no-libcall).
TEST_P(Uftrace, ReplayIsTheProgramsExpectedText) { record_and_compare(GetParam(), false); }

// With the library calls, as uftrace records by default: the same expected text for
// every build (the programs print nothing a compiler would turn into another call).
TEST_P(Uftrace, WithLibraryCalls) { record_and_compare(GetParam(), true); }

// Arguments and return values at an mcount site: the stub undoes the frame, so the
// arguments are read from their registers as at an entry site, and the return value
// after the real return. One -O0 build (gcc) and one whose prologue moved the argument
// into a callee-saved register before mcount (clang -O2).
TEST(UftraceMcount, ArgumentsAndReturnValues) {
  for (const char* file : {"uft_fibonacci_gcc_O0_pg", "uft_fibonacci_clang_O2_pg"}) {
    const Program* p = nullptr;
    for (const Program& q : kPrograms)
      if (std::string(q.file) == file) p = &q;
    ASSERT_NE(p, nullptr);
    if (*p->missing) continue;
    utramp::test::TempDir tmp("utramp-uftrace-test");
    const std::string exe = std::string(UTRAMP_UFT_DIR) + "/" + file;
    const std::string dir = tmp.path + "/trace";
    const RunResult rec = run_in({UTRAMP_CLI, "record", "-o", dir, "-F", "fib", "-A", "fib@arg1",
                                  "-R", "fib", "--", exe, "4"},
                                 tmp.path);
    ASSERT_EQ(rec.exit_code, 1) << rec.err;  // fib(4) is 3, not 5
    const RunResult replay = run_in({UTRAMP_CLI, "replay", dir}, tmp.path);
    ASSERT_EQ(replay.exit_code, 0) << replay.err;
    SCOPED_TRACE(file);
    utramp::test::expect_golden("fibonacci_args", mask_replay(replay.out, dir));
  }
}

// uftrace's filters, on s-filter.c built every way: `-F X` records X and everything it
// calls (in every thread), `-N X` nothing inside X, `-D N` counts from each -F match
// (recursion: each match starts again) or from the thread's root without -F. A longjmp
// out of a -F call leaves its scope: what the program calls after it is not recorded.
// A signal handler's calls are in the scope of the call it interrupted (s-signal.c).
// Each case has one expected text (golden/filter_<case>.txt) whatever the build; they
// match what uftrace 0.13 prints for the same command on the -pg build (docs/tracing.md,
// "Filters", says where uftrace differs: its longjmp).
struct FilterCase {
  const char* name;
  std::vector<std::string> args;
  const char* program = "filter";  // s-PROGRAM.c
};

const FilterCase kFilterCases[] = {
    {"F", {"-F", "b"}},
    {"N", {"-N", "c"}},
    {"F_D", {"-F", "a", "-D", "2"}},
    {"F_N", {"-F", "a", "-N", "c"}},
    {"D", {"-D", "2"}},
    {"recursion", {"-F", "down", "-D", "1"}},
    {"longjmp", {"-F", "leave"}},
    {"thread", {"-F", "worker"}},
    {"only", {"--only", "b", "--only", "d"}},
    {"skip", {"--skip", "c", "--skip", "down", "--skip", "worker"}},
    // s-signal.c: a handler's calls are in the scope of what the signal interrupted.
    {"signal_F", {"-F", "handler"}, "signal"},
    {"signal_N", {"-N", "foo"}, "signal"},
    {"signal_F_outer", {"-F", "foo"}, "signal"},
};

class UftraceFilters : public Uftrace {};

TEST_P(UftraceFilters, ReplayIsUftraces) {
  const Program& p = GetParam();
  for (const FilterCase& c : kFilterCases) {
    SCOPED_TRACE(c.name);
    // The same build of the case's program (s-filter.c's build names it).
    std::string file = p.file;
    file.replace(file.find("filter"), 6, c.program);
    const std::string exe = std::string(UTRAMP_UFT_DIR) + "/" + file;
    utramp::test::TempDir tmp("utramp-uftrace-test");
    const std::string dir = tmp.path + "/trace";
    // atexit: gcrt1's (-pg), see above; other builds have none (and would be told so).
    std::vector<std::string> argv = {UTRAMP_CLI, "record", "-o", dir, "--no-libcall"};
    if (std::string(p.flavour) == "pg" || std::string(p.flavour) == "fentry")
      argv.insert(argv.end(), {"--skip", "atexit"});
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    argv.insert(argv.end(), {"--", exe});
    const RunResult rec = run_in(argv, tmp.path);
    ASSERT_EQ(rec.exit_code, 0) << rec.err;
    EXPECT_EQ(rec.err.find("matches no function"), std::string::npos) << rec.err;
    const RunResult replay = run_in({UTRAMP_CLI, "replay", dir}, tmp.path);
    ASSERT_EQ(replay.exit_code, 0) << replay.err;
    utramp::test::expect_golden(std::string("filter_") + c.name, by_thread(mask_replay(replay.out, dir)));
  }
}

// A pattern that names no function is said, with the option and the pattern, and the
// program still runs.
TEST(UftraceFilterWarnings, PatternMatchingNothingIsNamed) {
  const std::string exe = std::string(UTRAMP_UFT_DIR) + "/uft_filter_gcc_O2_pfe";
  if (!std::filesystem::exists(exe)) GTEST_SKIP() << exe << " not built: gcc not found";
  utramp::test::TempDir tmp("utramp-uftrace-test");
  const RunResult rec = run_in({UTRAMP_CLI, "record", "-o", tmp.path + "/trace", "--no-libcall", "-F", "b",
                                "-N", "nothing_*", "--", exe},
                               tmp.path);
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  EXPECT_NE(rec.err.find("-N 'nothing_*' matches no function of " + exe), std::string::npos) << rec.err;
  EXPECT_EQ(rec.err.find("-F 'b'"), std::string::npos) << rec.err;
}

// The function tracer has no exits: -F/-N (scopes) are refused with it, --only is not.
TEST(UftraceFilterWarnings, FunctionTracerRefusesScopes) {
  const std::string exe = std::string(UTRAMP_UFT_DIR) + "/uft_filter_gcc_O2_pfe";
  if (!std::filesystem::exists(exe)) GTEST_SKIP() << exe << " not built: gcc not found";
  utramp::test::TempDir tmp("utramp-uftrace-test");
  const RunResult bad =
      run_in({UTRAMP_CLI, "record", "-o", tmp.path + "/t1", "--tracer", "function", "-F", "b", "--", exe}, tmp.path);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("-F and -N need --tracer function_graph"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.path + "/t1"));
  const RunResult ok = run_in(
      {UTRAMP_CLI, "record", "-o", tmp.path + "/t2", "--tracer", "function", "--only", "b", "--", exe}, tmp.path);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// Coroutines beyond the execution stacks a thread keeps (64): the program runs as
// untraced, and what the tracer could not follow is said in the replay where it
// happened — the stacks made with every slot taken (six of seventy), and the one not
// started yet whose slot main's stack took at its first switch — instead of being
// misnested silently. Main keeps its calls; the calls of the coroutines not followed
// nest under the stack that switched to them (and are closed as left by longjmp when it
// goes on elsewhere).
TEST(UftraceContexts, MoreStacksThanKeptAreReported) {
  const std::string exe = std::string(UTRAMP_UFT_DIR) + "/uft_manycontexts";
  if (!std::filesystem::exists(exe)) GTEST_SKIP() << exe << " not built: gcc not found";
  utramp::test::TempDir tmp("utramp-uftrace-test");
  const std::string dir = tmp.path + "/trace";
  const RunResult plain = run_in({exe}, tmp.path);
  const RunResult rec = run_in({UTRAMP_CLI, "record", "-o", dir, "--no-libcall", "--", exe}, tmp.path);
  ASSERT_EQ(rec.exit_code, plain.exit_code) << rec.err;
  EXPECT_EQ(rec.out, plain.out);
  const RunResult replay = run_in({UTRAMP_CLI, "replay", dir}, tmp.path);
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = replay.out.find(what); at != std::string::npos; at = replay.out.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("not followed: more execution stacks than the tracer keeps"), 7u) << replay.out;
  EXPECT_EQ(count("the stack left was not kept"), 0u) << replay.out;
  EXPECT_EQ(count("} /* main */"), 1u) << replay.out;  // main's stack kept, closed normally
}

std::string build_name(const ::testing::TestParamInfo<Program>& i) {
  std::string n = i.param.file;
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Builds, Uftrace, ::testing::ValuesIn(kPrograms), build_name);

std::vector<Program> filter_builds() {
  std::vector<Program> v;
  for (const Program& p : kPrograms)
    if (std::string(p.program) == "filter") v.push_back(p);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Builds, UftraceFilters, ::testing::ValuesIn(filter_builds()), build_name);

}  // namespace
