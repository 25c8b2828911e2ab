// The suite's negative cases: programs (or files) that must be refused, one test per
// file. negative_expected.txt states, for each, the stage that refuses it and words its
// message must contain ("CASE STAGE WORDS..."):
//
//   data      the file itself is invalid (no expectation, an unknown directive)
//   assemble  the assembler refuses the text (bad register, operand count, range...)
//   load      the checker refuses the instructions (reserved fields set...)
//   result    the program runs, but not as the file says (the case is wrong on purpose:
//             a result that differs only in its high 32 bits, an error that never comes)
//
// Where a file gives the error text (`-- error Invalid register`) and the assembler is
// the stage, the message must contain that text too. Both engines must agree.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "conformance_data.hpp"

namespace {

using namespace utramp::ebpf;
using namespace utramp::ebpf::testing;

struct Expect {
  std::string stage;
  std::string words;
};

std::map<std::string, Expect> expectations() {
  std::map<std::string, Expect> out;
  std::ifstream in(std::string(UTRAMP_EBPF_TEST_DIR) + "/negative_expected.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    Expect e;
    std::string name;
    ls >> name >> e.stage;
    std::getline(ls, e.words);
    e.words.erase(0, e.words.find_first_not_of(' '));
    out[name] = e;
  }
  return out;
}

std::vector<std::string> negative_names() { return utramp::ebpf::testing::case_names("negative"); }

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  return utramp::ebpf::testing::param_test_name(info.param);
}

class Negative : public ::testing::TestWithParam<std::string> {};

TEST_P(Negative, Refused) {
  const auto path = conformance_dir() / "negative" / (GetParam() + ".data");
  const auto all = expectations();
  auto it = all.find(GetParam());
  ASSERT_NE(it, all.end()) << GetParam() << " has no line in negative_expected.txt";
  const Expect& want = it->second;
  std::string file_error;
  if (auto c = parse_data_file(path); c && c->error) file_error = *c->error;
  for (EngineKind e : {EngineKind::interpreter, EngineKind::jit}) {
    // Unverified: these cases test the runner and the assembler; a wrong expectation
    // must reach the run (the verifier would stop `error` at load, first).
    const Outcome o = run_case(path, e, /*unverified=*/true);
    EXPECT_NE(o.stage, Stage::pass) << engine_name(e) << " accepted it";
    EXPECT_EQ(stage_name(o.stage), want.stage) << engine_name(e) << ": " << o.message;
    EXPECT_NE(o.message.find(want.words), std::string::npos)
        << engine_name(e) << ": \"" << o.message << "\" lacks \"" << want.words << "\"";
    if (o.stage == Stage::assemble && !file_error.empty()) {
      EXPECT_NE(o.message.find(file_error), std::string::npos)
          << "the file expects \"" << file_error << "\", the assembler said \"" << o.message << "\"";
    }
    std::printf("[ refused     ] %-28s %-8s %s: %s\n", GetParam().c_str(), engine_name(e),
                stage_name(o.stage), o.message.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Negative, ::testing::ValuesIn(negative_names()), test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Negative);

TEST(NegativeSuite, ExpectationsAreExact) {
  if (!conformance_present()) GTEST_SKIP() << "conformance cases not found in " << conformance_dir().string();
  const auto names = negative_names();
  const auto all = expectations();
  for (const auto& n : names) EXPECT_TRUE(all.count(n)) << n << " has no line in negative_expected.txt";
  for (const auto& [n, e] : all)
    EXPECT_TRUE(std::find(names.begin(), names.end(), n) != names.end()) << n << " names no negative case";
}

}  // namespace
