// Library calls through the PLT and GOT (ftrace/libcall.hpp), end to end: the fixture
// (libcall_fixture.c) bound lazily, at load (-z now) and without a PLT (-fno-plt), by
// gcc and clang, is recorded by default settings; its output and exit code must be the
// untraced ones, and the report must count each library call exactly. Then Debian's
// own programs, which nobody here built, the same way.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "temp_dir.hpp"

using utramp::test::RunResult;

namespace {

struct Fixture {
  const char *file, *binding, *missing;
};
void PrintTo(const Fixture& f, std::ostream* os) { *os << f.file; }

const Fixture kFixtures[] = {
#define LIBCALL_FIXTURE(file, binding, missing) {file, binding, missing},
#include "libcall_matrix.inc"
#undef LIBCALL_FIXTURE
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `utramp report DIR`: calls per function (the calls column, then the name).
std::map<std::string, long> report_calls(const std::string& dir) {
  const RunResult r = utramp::test::run_cli({"report", dir});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, long> calls;
  static const std::regex row(R"( (\d+)  (\S.*)$)");
  std::istringstream in(r.out);
  std::string line;
  std::smatch m;
  while (std::getline(in, line))
    if (!line.starts_with("#") && std::regex_search(line, m, row)) calls[m[2]] += std::stol(m[1]);
  return calls;
}

// What the CLI itself says on stderr (a program without compiler sites is said to be).
std::string without_cli_lines(const std::string& err) {
  std::istringstream in(err);
  std::string out, line;
  while (std::getline(in, line))
    if (!line.starts_with("utramp record: ")) out += line + "\n";
  return out;
}

// Records ARGS (a program and its arguments) with OPTS into a scratch directory; checks
// that the program said and returned what it does untraced.
struct Recorded {
  utramp::test::TempDir tmp{"utramp-libcall-test"};
  std::string dir = tmp.path + "/trace";
  RunResult traced;

  Recorded(const std::vector<std::string>& opts, const std::vector<std::string>& args,
           const std::string& cwd = "") {
    const RunResult plain = utramp::test::run_program(args, {.cwd = cwd});
    std::vector<std::string> rec = {"record", "-q", "-o", dir};
    rec.insert(rec.end(), opts.begin(), opts.end());
    rec.push_back("--");
    rec.insert(rec.end(), args.begin(), args.end());
    traced = utramp::test::run_cli(rec, {.cwd = cwd, .timeout_s = 120});
    EXPECT_FALSE(traced.timed_out);
    EXPECT_EQ(traced.exit_code, plain.exit_code) << traced.err;
    EXPECT_EQ(traced.out, plain.out);
    EXPECT_EQ(without_cli_lines(traced.err), plain.err);
  }
};

class LibCall : public ::testing::TestWithParam<Fixture> {};

TEST_P(LibCall, EachCallOnceWithItsLibrary) {
  const Fixture& f = GetParam();
  if (*f.missing) GTEST_SKIP() << f.missing;
  const std::string exe = std::string(UTRAMP_REC_DIR) + "/" + f.file;
  Recorded r({}, {exe});
  EXPECT_EQ(r.traced.out, "step 0: 0 2, pid ok\nstep 1: 1 1, pid ok\nstep 2: 0 2, pid ok\ndone 3\n");
  EXPECT_EQ(r.traced.exit_code, 3);
  auto calls = report_calls(r.dir);
  // Three steps of malloc, qsort (calling back by_value once: two elements), printf,
  // getpid and free; the last printf after the longjmp; longjmp and exit never return.
  const std::map<std::string, long> want = {
      {"main", 1},   {"step", 3},  {"malloc", 3},  {"qsort", 3}, {"by_value", 3},
      {"printf", 4}, {"getpid", 3}, {"free", 3},   {"leave", 1}, {"longjmp", 1},
      {"fflush", 1}, {"exit", 1}};
  for (const auto& [name, n] : want) EXPECT_EQ(calls[name], n) << name;
  // setjmp returns twice: never traced (its return address must stay the caller's).
  EXPECT_EQ(calls.count("_setjmp") + calls.count("setjmp"), 0u);

  // The call graph: library calls nest in the function that made them, and the
  // program's callback in the library function that called it.
  const RunResult replay = utramp::test::run_cli({"replay", r.dir});
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_NE(replay.out.find("|     qsort() {\n"), std::string::npos) << replay.out;
  EXPECT_NE(replay.out.find("|       by_value();\n"), std::string::npos) << replay.out;
  EXPECT_NE(replay.out.find("|     malloc();\n"), std::string::npos) << replay.out;

  // Each library function with the object that defines it (functions-PID.tsv).
  std::string tsv;
  for (const auto& e : std::filesystem::directory_iterator(r.dir))
    if (e.path().filename().string().starts_with("functions-")) tsv += read_file(e.path());
  for (const char* fn : {"malloc", "qsort", "printf", "getpid", "free", "longjmp", "exit"}) {
    const size_t at = tsv.find(std::string("\t") + fn + "\t");
    ASSERT_NE(at, std::string::npos) << fn << " in\n" << tsv;
    const std::string line = tsv.substr(at, tsv.find('\n', at) - at);
    EXPECT_NE(line.find("/libc.so.6"), std::string::npos) << line;
  }
}

// The options, on one binding (they do not depend on it).
TEST(LibCallOptions, OffFilteredAndDepthLimited) {
  const Fixture& f = kFixtures[0];
  if (*f.missing) GTEST_SKIP() << f.missing;
  const std::string exe = std::string(UTRAMP_REC_DIR) + "/" + f.file;
  {
    Recorded r({"--no-libcall"}, {exe});
    auto calls = report_calls(r.dir);
    EXPECT_EQ(calls["step"], 3);
    EXPECT_EQ(calls.count("malloc") + calls.count("printf") + calls.count("qsort"), 0u);
  }
  {
    // --skip: those library calls are not hooked; the callback is still traced.
    Recorded r({"--skip", "malloc", "--skip", "q*"}, {exe});
    auto calls = report_calls(r.dir);
    EXPECT_EQ(calls["getpid"], 3);
    EXPECT_EQ(calls.count("malloc") + calls.count("qsort"), 0u);
    EXPECT_EQ(calls["by_value"], 3);  // still traced, now under step
  }
  {
    Recorded r({"--only", "getpid", "--only", "step"}, {exe});
    auto calls = report_calls(r.dir);
    EXPECT_EQ(calls, (std::map<std::string, long>{{"getpid", 3}, {"step", 3}}));
  }
  {
    // uftrace's -N on a library function: nothing inside it, the program's callback
    // that qsort calls included.
    Recorded r({"-N", "qsort"}, {exe});
    auto calls = report_calls(r.dir);
    EXPECT_EQ(calls["getpid"], 3);
    EXPECT_EQ(calls["step"], 3);
    EXPECT_EQ(calls.count("qsort") + calls.count("by_value"), 0u);
  }
  {
    // uftrace's -F on a library function: the call and the callback it makes, nothing
    // of its caller.
    Recorded r({"-F", "qsort"}, {exe});
    auto calls = report_calls(r.dir);
    EXPECT_EQ(calls.count("step") + calls.count("getpid") + calls.count("main"), 0u);
    EXPECT_GT(calls["qsort"], 0);
    EXPECT_GT(calls["by_value"], 0);
  }
  {
    Recorded r({"-D", "2"}, {exe});  // main and step: their library calls are deeper
    auto calls = report_calls(r.dir);
    EXPECT_EQ(calls["step"], 3);
    EXPECT_EQ(calls["printf"], 1);  // main's own, after the longjmp
    EXPECT_EQ(calls.count("malloc"), 0u);
  }
}

// dlopen and dlsym look at their caller's address: traced, they must still take the
// program for the caller ($ORIGIN is the program's directory, RTLD_NEXT searches after
// the program), and they show in the call graph as uftrace shows them — but for
// dlsym(RTLD_NEXT), which goes untraced (ftrace/libcall.hpp says why).
TEST(LibCallCaller, DlopenAndDlsymSeeTheProgram) {
  for (const char* binding : {"lazy", "noplt"}) {
    const std::string exe = std::string(UTRAMP_REC_DIR) + "/libcall_caller_" + binding;
    if (!std::filesystem::exists(exe)) GTEST_SKIP() << exe << " not built: gcc not found";
    Recorded r({}, {exe});
    EXPECT_EQ(r.traced.out, "dep 42, next 1\n") << binding;
    EXPECT_EQ(r.traced.exit_code, 0) << binding;
    auto calls = report_calls(r.dir);
    const std::map<std::string, long> want = {{"open_dep", 1}, {"next_getpid", 1}, {"dlopen", 1},
                                              {"dlsym", 1},    {"dlclose", 1},     {"getpid", 1}};
    for (const auto& [name, n] : want) EXPECT_EQ(calls[name], n) << binding << ": " << name;
    const RunResult replay = utramp::test::run_cli({"replay", r.dir});
    ASSERT_EQ(replay.exit_code, 0) << replay.err;
    EXPECT_NE(replay.out.find("|   open_dep() {\n"), std::string::npos) << replay.out;
    EXPECT_NE(replay.out.find("|     dlopen();\n"), std::string::npos) << replay.out;
  }
}

// Debian's programs (stripped, built by someone else), lazily bound PIEs: the output is
// the untraced one, and the calls show.
TEST(LibCallDebian, LsAndSort) {
  utramp::test::TempDir data("utramp-libcall-data");
  {
    std::ofstream lines(data.path + "/lines.txt");
    for (int i = 0; i < 200; ++i) lines << (i * 7919) % 200 << "\n";
  }
  for (const char* name : {"b", "a", "c"}) std::ofstream(data.path + "/" + name) << name;
  {
    Recorded r({}, {"/bin/ls", "-l", "--time-style=+", data.path});
    EXPECT_EQ(r.traced.out.find("lines.txt") != std::string::npos, true) << r.traced.out;
    auto calls = report_calls(r.dir);
    EXPECT_EQ(calls["opendir"], 1);
    EXPECT_GE(calls["readdir"], 5);  // ., .., a, b, c, lines.txt, then the end
    EXPECT_GE(calls["malloc"], 1);
  }
  {
    Recorded r({}, {"/usr/bin/sort", "-n", data.path + "/lines.txt"});
    EXPECT_EQ(r.traced.out.substr(0, 6), "0\n1\n2\n");
    auto calls = report_calls(r.dir);
    EXPECT_EQ(calls["fwrite_unlocked"], 200);  // one per line written
    EXPECT_GE(calls["memchr"], 200);            // lines found in the buffer read
  }
}

INSTANTIATE_TEST_SUITE_P(Bindings, LibCall, ::testing::ValuesIn(kFixtures),
                         [](const auto& info) { return std::string(info.param.file); });

}  // namespace
