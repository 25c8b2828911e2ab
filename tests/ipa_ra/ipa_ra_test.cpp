// The traced program behaves exactly as untraced when its callers rely on registers the
// callee does not clobber (gcc -fipa-ra), for every way utramp runs code around a call
// of a function without a compiler site. One test per cell of ipa_matrix.inc (compiler
// x optimisation) and way of tracing; each compares the fixture's checksum under
// tracing with its untraced run, and checks that the calls were traced indeed (a
// tracer that attached nothing would leave the checksum alone too).
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "temp_dir.hpp"

namespace {

using utramp::test::run_program;
using utramp::test::RunOptions;
using utramp::test::RunResult;
using utramp::test::TempDir;

struct Fixture {
  std::string file, cc, opt, missing;
  std::string path() const { return std::string(UTRAMP_IPA_DIR) + "/" + file; }
};

const std::vector<Fixture>& matrix() {
  static const std::vector<Fixture> m = {
#define IPA_FIXTURE(file, cc, opt, missing) Fixture{file, cc, opt, missing},
#include "ipa_matrix.inc"
#undef IPA_FIXTURE
  };
  return m;
}

// The fixture's functions and how often one run of its workload calls each.
const std::map<std::string, int> kCalls = {{"work", 40}, {"mix3", 40}, {"bump", 40},
                                           {"scale", 80}, {"many", 40}, {"fmr", 40}};

// How a program is traced: the CLI's arguments before `-- PROGRAM run`, and an
// environment variable for the agent.
struct Way {
  std::string name;
  std::vector<std::string> args;  // "record" ways get -q -o DIR after "record"
  std::string env;                // NAME=VALUE, or empty
};

const std::vector<Way>& ways() {
  static const std::vector<Way> w = {
      {"record", {"record"}, ""},
      {"record_no_inline", {"record"}, "UTRAMP_NO_INLINE_TRACER=1"},
      {"record_general", {"record", "-t", "1ns"}, ""},
      {"record_args", {"record", "-A", "work@arg1", "-A", "many@arg1,arg6", "-R", "mix3", "-R", "fmr"}, ""},
      {"record_function_tracer", {"record", "--tracer", "function"}, ""},
      {"run_bpf", {"run"}, ""},
  };
  return w;
}

struct Cell {
  const Fixture* fx;
  const Way* way;    // null: the C API (the fixture's `capi` mode)
  bool vec = false;  // with `way` null: the `capi-vec` mode (AVX and AVX-512 state)
};

std::string cell_way(const Cell& c) {
  return c.way ? c.way->name : std::string(c.vec ? "capi_vec" : "capi");
}

void PrintTo(const Cell& c, std::ostream* os) { *os << c.fx->file << " " << cell_way(c); }

std::vector<Cell> cells() {
  std::vector<Cell> v;
  for (const Fixture& f : matrix()) {
    v.push_back({&f, nullptr});
    v.push_back({&f, nullptr, true});
    for (const Way& w : ways()) v.push_back({&f, &w});
  }
  return v;
}

std::string cell_name(const testing::TestParamInfo<Cell>& i) {
  return i.param.fx->file + "_" + cell_way(i.param);
}

const std::vector<std::string> kCapiModes = {"untraced", "fentry", "fexit",
                                             "fentry+fexit+fmod_ret", "fmod_ret-skip"};

RunOptions bounded() {
  RunOptions o;
  o.timeout_s = 30;  // the bug this guards against loops forever
  return o;
}

std::string describe(const RunResult& r) {
  return "exit " + std::to_string(r.exit_code) + (r.timed_out ? " (timed out)" : "") +
         "\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

// "checksum N" from a run of the workload.
std::string checksum(const std::string& out) {
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("checksum ", 0) == 0) return line.substr(9);
  return "";
}

// Calls per function from `utramp report DIR`: rows end with "CALLS NAME".
std::map<std::string, int> reported_calls(const std::string& report) {
  std::map<std::string, int> out;
  std::istringstream in(report);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream row(line);
    std::vector<std::string> tok;
    for (std::string t; row >> t;) tok.push_back(t);
    if (tok.size() < 2 || kCalls.count(tok.back()) == 0) continue;
    out[tok.back()] = std::atoi(tok[tok.size() - 2].c_str());
  }
  return out;
}

class IpaRa : public testing::TestWithParam<Cell> {};

TEST_P(IpaRa, BehavesAsUntraced) {
  const Fixture& fx = *GetParam().fx;
  if (!fx.missing.empty()) GTEST_SKIP() << fx.file << ": " << fx.missing;
  const RunResult plain = run_program({fx.path(), "run"}, bounded());
  ASSERT_EQ(plain.exit_code, 0) << describe(plain);
  const std::string expected = checksum(plain.out);
  ASSERT_FALSE(expected.empty()) << describe(plain);

  const Way* way = GetParam().way;
  if (!way && GetParam().vec) {
    // In-process, the programs changing the AVX and AVX-512 state as well; each mode
    // with the upper halves of ymm/zmm0-15 zero at the calls (utramp keeps the state
    // with moves) and holding values (it uses XSAVE). Each must agree with its own
    // untraced run: the checksum covers that state, not comparable with `run`'s.
    const RunResult r = run_program({fx.path(), "capi-vec"}, bounded());
    if (r.exit_code == 3) GTEST_SKIP() << "no AVX: the moves keep xmm0-15 only, as capi tests";
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    std::istringstream in(r.out);
    std::vector<std::string> modes, want;
    std::map<std::string, std::string> untraced;
    for (const char* group : {"clean-", "dirty-"})
      for (const std::string& m : kCapiModes) want.push_back(group + m);
    for (std::string mode, value; in >> mode >> value;) {
      modes.push_back(mode);
      const std::string group = mode.substr(0, mode.find('-') + 1);
      if (!untraced.count(group)) untraced[group] = value;  // the group's first: untraced
      EXPECT_EQ(value, untraced[group]) << mode << " changed the program\n" << describe(r);
    }
    EXPECT_EQ(modes, want) << describe(r);
    return;
  }
  if (!way) {
    // In-process: untraced, then each kind of program; all must agree.
    const RunResult r = run_program({fx.path(), "capi"}, bounded());
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    std::istringstream in(r.out);
    std::vector<std::string> modes;
    for (std::string mode, value; in >> mode >> value;) {
      modes.push_back(mode);
      EXPECT_EQ(value, expected) << mode << " changed the program\n" << describe(r);
    }
    EXPECT_EQ(modes, kCapiModes) << describe(r);
    return;
  }
  std::vector<std::string> argv;
  if (!way->env.empty()) argv = {"/usr/bin/env", way->env};
  argv.push_back(UTRAMP_CLI);
  TempDir tmp("utramp-ipa-ra");
  const std::string dir = tmp.path + "/trace";
  if (way->args[0] == "record") {
    argv.insert(argv.end(), {"record", "-q", "-o", dir});
    argv.insert(argv.end(), way->args.begin() + 1, way->args.end());
  } else {
    const std::string object = std::string(UTRAMP_BPF_EXAMPLES_DIR) + "/latency.bpf.o";
    if (std::string(UTRAMP_BPF_EXAMPLES_DIR).empty())
      GTEST_SKIP() << "no eBPF examples (clang -target bpf missing)";
    argv.insert(argv.end(), {"run", object});
  }
  argv.insert(argv.end(), {"--", fx.path(), "run"});
  const RunResult r = run_program(argv, bounded());
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(checksum(r.out), expected) << "the traced program computed something else\n"
                                       << describe(r);
  if (way->args[0] == "run") {
    // latency.bpf.o's fexit program counts the calls of `work`.
    EXPECT_NE(r.out.find("@calls: " + std::to_string(kCalls.at("work"))), std::string::npos)
        << describe(r);
    return;
  }
  const RunResult rep = run_program({UTRAMP_CLI, "report", dir}, bounded());
  ASSERT_EQ(rep.exit_code, 0) << describe(rep);
  EXPECT_EQ(reported_calls(rep.out), kCalls) << "not every call was traced\n" << rep.out;
}

INSTANTIATE_TEST_SUITE_P(Matrix, IpaRa, testing::ValuesIn(cells()), cell_name);

// Return values through images that keep every register (the fixture's `capi-ret`): a
// long double in st0, a double in xmm0, a struct in rax:rdx and an int, under fexit,
// fmod_ret continuing (with fexit and without) and fmod_ret skipping ret_int's body with
// a value of its own. Each line is "MODE LD D A B I FLAGS"; all must match the untraced
// run's but I after the skip, which must be what the program returned for each call.
constexpr long kSkipValue = 4242, kRetCalls = 40;  // the fixture's kSkipValue and g_n

class IpaRaReturns : public testing::TestWithParam<const Fixture*> {};

TEST_P(IpaRaReturns, AsUntraced) {
  const Fixture& fx = *GetParam();
  if (!fx.missing.empty()) GTEST_SKIP() << fx.file << ": " << fx.missing;
  const RunResult r = run_program({fx.path(), "capi-ret"}, bounded());
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::istringstream in(r.out);
  std::map<std::string, std::vector<std::string>> rows;
  std::vector<std::string> modes;
  for (std::string line; std::getline(in, line);) {
    std::istringstream row(line);
    std::vector<std::string> tok;
    for (std::string t; row >> t;) tok.push_back(t);
    ASSERT_EQ(tok.size(), 7u) << line << "\n" << describe(r);
    modes.push_back(tok[0]);
    rows[tok[0]] = {tok.begin() + 1, tok.end()};
  }
  ASSERT_EQ(modes, (std::vector<std::string>{"untraced", "fexit", "fmod_ret", "fexit+fmod_ret",
                                             "fmod_ret-skip"}))
      << describe(r);
  const std::vector<std::string>& want = rows["untraced"];
  EXPECT_EQ(want[5], "0") << "the untraced run raised FP exceptions\n" << describe(r);
  for (const std::string& m : modes) {
    std::vector<std::string> expect = want;
    if (m == "fmod_ret-skip") expect[4] = std::to_string(kSkipValue * kRetCalls);
    EXPECT_EQ(rows[m], expect) << m << " (LD D A B I FLAGS)\n" << describe(r);
  }
}

std::vector<const Fixture*> fixtures() {
  std::vector<const Fixture*> v;
  for (const Fixture& f : matrix()) v.push_back(&f);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Matrix, IpaRaReturns, testing::ValuesIn(fixtures()),
                         [](const testing::TestParamInfo<const Fixture*>& i) { return i.param->file; });

}  // namespace
