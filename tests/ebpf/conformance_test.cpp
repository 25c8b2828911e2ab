// Every case of the eBPF ISA conformance suite on both engines, one test per file:
// each engine gives the expected r0, and the two agree on r0, on the memory after the
// run and on whether the run faulted.
//
// A case an engine cannot pass is listed, with the reason, in
// conformance_known_failures.txt ("CASE ENGINE REASON..."). The list is exact: a listed
// case that passes fails its test as much as an unlisted case that fails, and
// ConformanceSummary checks that every line names an existing case.
//
// Every case is verified first. The cases the verifier refuses (unsafe on purpose, or
// beyond what it proves) are listed in conformance_unverified.txt ("CASE WORDS...": the
// words the refusal must contain); they then run unverified (ExecOptions::unverified,
// every runtime check on), and the list is exact as the known failures' is.
//
// The cases live outside the repository (UTRAMP_CONFORMANCE_DIR, by default
// ../shared/conformance beside it): when they are missing, ConformanceSuite.Present is
// skipped with the path it looked at, and no case test is instantiated.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "conformance_data.hpp"
#include "ebpf/asm.hpp"

namespace {

using namespace utramp::ebpf;
using namespace utramp::ebpf::testing;

constexpr EngineKind kEngines[] = {EngineKind::interpreter, EngineKind::jit};

// (case, engine) -> reason
std::map<std::pair<std::string, std::string>, std::string> known_failures() {
  std::map<std::pair<std::string, std::string>, std::string> out;
  std::ifstream in(std::string(UTRAMP_EBPF_TEST_DIR) + "/conformance_known_failures.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string name, engine, reason;
    ls >> name >> engine;
    std::getline(ls, reason);
    out[{name, engine}] = reason;
  }
  return out;
}

// case -> words of the verifier's refusal
std::map<std::string, std::string> unverified_cases() {
  std::map<std::string, std::string> out;
  std::ifstream in(std::string(UTRAMP_EBPF_TEST_DIR) + "/conformance_unverified.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string name, words;
    ls >> name;
    std::getline(ls, words);
    words.erase(0, words.find_first_not_of(' '));
    out[name] = words;
  }
  return out;
}

std::vector<std::string> case_names() { return utramp::ebpf::testing::case_names("tests"); }

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  return utramp::ebpf::testing::param_test_name(info.param);
}

TEST(ConformanceSuite, Present) {
  if (!conformance_present())
    GTEST_SKIP() << "conformance cases not found in " << conformance_dir().string()
                 << "/tests (configure with -DUTRAMP_CONFORMANCE_DIR=...)";
  SUCCEED() << data_files(conformance_dir() / "tests").size() << " cases in " << conformance_dir().string();
}

class Conformance : public ::testing::TestWithParam<std::string> {};

TEST_P(Conformance, BothEngines) {
  const auto path = conformance_dir() / "tests" / (GetParam() + ".data");
  const auto known = known_failures();
  const auto unv = unverified_cases();
  const auto u = unv.find(GetParam());
  const bool unverified = u != unv.end();
  if (unverified) {
    const Outcome v = run_case(path, EngineKind::jit);
    EXPECT_EQ(v.stage, Stage::load) << "listed in conformance_unverified.txt, but the verifier does not refuse it: "
                                    << stage_name(v.stage) << " " << v.message;
    EXPECT_NE(v.message.find(u->second), std::string::npos)
        << "the refusal lacks \"" << u->second << "\":\n" << v.message;
  }
  std::map<EngineKind, Outcome> out;
  for (EngineKind e : kEngines) {
    out[e] = run_case(path, e, unverified);
    const Outcome& o = out[e];
    auto it = known.find({GetParam(), engine_name(e)});
    if (it != known.end()) {
      EXPECT_NE(o.stage, Stage::pass) << engine_name(e) << " passes a case listed as failing ("
                                      << it->second << "): remove it from the list";
      continue;
    }
    EXPECT_EQ(o.stage, Stage::pass) << engine_name(e) << " failed at " << stage_name(o.stage) << ": "
                                    << o.message;
  }
  const Outcome& i = out[EngineKind::interpreter];
  const Outcome& j = out[EngineKind::jit];
  if (i.stage == Stage::pass || j.stage == Stage::pass || i.r0 || j.r0) {
    EXPECT_EQ(i.r0, j.r0) << "the engines disagree on r0";
    EXPECT_EQ(i.faulted, j.faulted) << "interpreter: " << i.message << "\njit: " << j.message;
    EXPECT_EQ(i.mem, j.mem) << "the engines leave different memory";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Conformance, ::testing::ValuesIn(case_names()), test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Conformance);

// The pass count per engine, printed, and the known-failure list checked as a whole.
TEST(ConformanceSummary, PassCountsAndKnownFailures) {
  if (!conformance_present()) GTEST_SKIP() << "conformance cases not found in " << conformance_dir().string();
  const auto names = case_names();
  const auto known = known_failures();
  const auto unv = unverified_cases();
  for (const auto& [n, words] : unv)
    EXPECT_TRUE(std::find(names.begin(), names.end(), n) != names.end()) << "unverified case " << n << " names no case";
  std::printf("[ conformance ] %zu/%zu cases verified, %zu run unverified\n", names.size() - unv.size(), names.size(),
              unv.size());
  std::set<std::pair<std::string, std::string>> failing;
  for (EngineKind e : kEngines) {
    size_t pass = 0;
    for (const auto& n : names) {
      const Outcome o = run_case(conformance_dir() / "tests" / (n + ".data"), e, unv.count(n) != 0);
      if (o.stage == Stage::pass) ++pass;
      else failing.insert({n, engine_name(e)});
    }
    std::printf("[ conformance ] %-11s %zu/%zu passed\n", engine_name(e), pass, names.size());
  }
  std::set<std::pair<std::string, std::string>> listed;
  for (const auto& [k, reason] : known) {
    listed.insert(k);
    EXPECT_TRUE(std::find(names.begin(), names.end(), k.first) != names.end())
        << "known failure " << k.first << " names no case";
  }
  for (const auto& [k, reason] : known) std::printf("[ known fail  ] %s %s:%s\n", k.first.c_str(), k.second.c_str(), reason.c_str());
  EXPECT_EQ(failing, listed) << "the failing cases differ from conformance_known_failures.txt";
}

// Every program of the suite survives disassembly and reassembly unchanged.
TEST(ConformanceSuite, DisassemblyRoundTrips) {
  if (!conformance_present()) GTEST_SKIP() << "conformance cases not found in " << conformance_dir().string();
  size_t n = 0;
  for (const auto& p : data_files(conformance_dir() / "tests")) {
    auto c = parse_data_file(p);
    ASSERT_TRUE(c) << c.error().message;
    auto prog = case_program(*c);
    ASSERT_TRUE(prog) << p << ": " << prog.error().message;
    std::string text;
    for (size_t i = 0; i < prog->size(); ++i) {
      text += disassemble_insn(*prog, i) + "\n";
      if ((*prog)[i].code == op::kLddw) ++i;
    }
    auto again = assemble(text);
    ASSERT_TRUE(again) << p << ": " << again.error().message << "\n" << text;
    EXPECT_EQ(*again, *prog) << p << "\n" << text;
    ++n;
  }
  EXPECT_GT(n, 0u);
}

}  // namespace
