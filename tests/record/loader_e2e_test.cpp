// The dynamic loader under the agent (src/sites/loader_watch.hpp): objects loaded after
// start-up are announced by the loader before any of their code runs and traced from
// their first call; the program's own dlopen is not interposed, so the loader searches
// the caller's RUNPATH as it would untraced; nothing the agent does while it holds its
// locks loads an object (a target without debug info used to hang: libdw loaded
// libdebuginfod, whose announcement re-entered the agent).
#include <gtest/gtest.h>

#include <algorithm>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "cli_runner.hpp"
#include "temp_dir.hpp"

namespace {

using utramp::test::RunResult;
using utramp::test::TempDir;

const std::string kDir = UTRAMP_LOADER_DIR;
const std::string kHost = kDir + "/ld_host";

// Calls per function, from `utramp report DIR` ("... Calls  Function" rows).
std::map<std::string, long> calls(const std::string& dir) {
  const RunResult r = utramp::test::run_cli({"report", dir});
  std::map<std::string, long> out;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream row(line);
    std::string cols[12];
    int n = 0;
    while (n < 12 && row >> cols[n]) ++n;
    // total unit self unit avg unit max unit calls function
    if (n == 10 && std::isdigit(static_cast<unsigned char>(cols[8][0]))) out[cols[9]] = std::stol(cols[8]);
  }
  return out;
}

std::string read_logs(const std::string& dir) {
  std::string all;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("agent-", 0) != 0) continue;
    std::ifstream f(e.path());
    all += std::string(std::istreambuf_iterator<char>(f), {});
  }
  return all;
}

TEST(Loader, PluginHostBehavesAsUntraced) {
  const RunResult plain = utramp::test::run_program({kHost});
  ASSERT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  ASSERT_EQ(plain.out.find("failed"), std::string::npos) << plain.out;
  TempDir t("utramp-loader");
  const RunResult traced = utramp::test::run_cli({"record", "--libs", "-o", t.path + "/d", "--", kHost},
                                                 {.timeout_s = 120});
  ASSERT_FALSE(traced.timed_out) << traced.err;
  EXPECT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_EQ(traced.out, plain.out);  // every plugin found through the right RUNPATH
  // Every function of the program and of its libraries (thousands: more than the thread
  // counter slots, which are then shared) is traced, the program's own main included,
  // and the library calls it makes; the tracer's own library calls do not recurse.
  auto c = calls(t.path + "/d");
  EXPECT_EQ(c["main"], 1) << traced.err;
  EXPECT_EQ(c["printf"], std::count(plain.out.begin(), plain.out.end(), '\n')) << traced.err;  // a line each
  // The agent's own calls are not the program's: its control channel's socket was.
  for (const char* agents : {"socket", "bind", "listen"})
    EXPECT_EQ(c.count(agents), 0u) << agents << " recorded: the host makes no socket";
}

TEST(Loader, PluginsAreTracedFromTheirFirstCall) {
  TempDir t("utramp-loader");
  const std::string dir = t.path + "/d";
  const RunResult r = utramp::test::run_cli({"record", "--libs", "--only", "ld_*", "-o", dir, "--", kHost},
                                            {.timeout_s = 120});
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto c = calls(dir);
  // Loaded by the host's constructor, called once there... and once in main.
  EXPECT_EQ(c["ld_ctor_value"], 1) << r.err;
  EXPECT_EQ(c["ld_ctor_twice"], 1);
  // Three rounds of ten leaves (two objects, one of them loaded twice, maybe at the
  // same address), and the dependency each round loads through the plugin's RUNPATH.
  EXPECT_EQ(c["ld_plug_work"], 3);
  EXPECT_EQ(c["ld_plug_leaf"], 30);
  EXPECT_EQ(c["ld_dep_value"], 3);
  // Their five 1-byte NOP sites were canonicalised although another thread ran: no
  // code of a plugin can run before the loader announces it.
  EXPECT_EQ(read_logs(dir).find("five 1-byte NOPs"), std::string::npos) << read_logs(dir);
}

}  // namespace
