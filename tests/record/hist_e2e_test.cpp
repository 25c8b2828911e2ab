// `utramp hist FUNC`: a function that cannot be measured is refused before the program
// runs, with the reason (it used to run the program and print "0 calls"); a library
// function the program calls is measured at its calls.
#include <gtest/gtest.h>

#include <string>

#include "cli_runner.hpp"

namespace {

using utramp::test::RunResult;

TEST(Hist, ReasonWhenNothingCanBeMeasured) {
  const std::string tiny = UTRAMP_LAUNCH_DIR "/tiny";
  struct Case {
    std::vector<std::string> args;
    std::string want;
  };
  const Case cases[] = {
      {{"hist", "no_such_function", "--", tiny}, "no function of"},
      {{"hist", "tiny", "--", tiny}, "too short"},
      {{"hist", "main", "--", "/bin/true"}, "stripped"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args[1] + " in " + c.args[3]);
    const RunResult r = utramp::test::run_cli(c.args, {.timeout_s = 60});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");  // nothing ran, no histogram of nothing
  }
}

// A library function the program imports (it calls it through its PLT/GOT) is measured
// at the program's calls, without --libs, as `record` shows library calls: it used to be
// refused as "no function of ... matches".
TEST(Hist, LibraryFunctionTheProgramCallsIsMeasured) {
  const RunResult r =
      utramp::test::run_cli({"hist", "pthread_create", "--", UTRAMP_BPF_TARGET, "3", "10"}, {.timeout_s = 60});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("bpf_target: 3 threads x 10 calls, 0 failures\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("3 calls of pthread_create; target exited 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("count: 3"), std::string::npos) << r.out;
}

}  // namespace
