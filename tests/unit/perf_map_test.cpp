// perf's map of generated code, /tmp/perf-PID.map (src/os/perf_map.hpp): the line's
// format, the switch, and whose file it may be written into.
#include "os/perf_map.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "second_user.hpp"
#include "temp_dir.hpp"

using namespace utramp;

namespace {

std::string perf_map_path() { return fmt::format("/tmp/perf-{}.map", getpid()); }

std::string slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(PerfMap, SwitchOverridesTheEnvironment) {
  os::set_perf_map(true);
  EXPECT_TRUE(os::perf_map_enabled());
  os::set_perf_map(false);
  EXPECT_FALSE(os::perf_map_enabled());
}

// perf's format: "START SIZE symbol", hex without 0x, one line per call; characters that
// would end the line early become '_'.
TEST(PerfMap, OneLineInPerfsFormat) {
  const std::string path = perf_map_path();
  const bool existed = access(path.c_str(), F_OK) == 0;
  os::perf_map_append(0x7f0012340000, 0x1a0, "utramp_pm_one");
  os::perf_map_append(0x7f0012350000, 0x20, std::string_view("utramp_pm\nsplit\0x", 17));
  const std::string text = slurp(path);
  EXPECT_NE(text.find("7f0012340000 1a0 utramp_pm_one\n"), std::string::npos) << text;
  EXPECT_NE(text.find("7f0012350000 20 utramp_pm_split_x\n"), std::string::npos) << text;
  if (!existed) unlink(path.c_str());
}

// /tmp/perf-PID.map is a name anyone can plant in /tmp beforehand. What another user left
// there (a symbolic link to a file of root's, a file of their own) is never written; a
// file made anew is the process's own, 0600, as perf requires (owner = its user or root).
TEST(PerfMap, OnlyTheProcessesOwnFileIsWritten) {
  if (auto why = utramp::test::no_second_user(); !why.empty()) GTEST_SKIP() << why;
  const std::string path = perf_map_path();
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (st.st_uid != geteuid()) GTEST_SKIP() << path << " belongs to uid " << st.st_uid;
    ASSERT_EQ(unlink(path.c_str()), 0);
  }
  utramp::test::TempDir tmp("utramp-perfmap");
  const std::string victim = tmp.path + "/victim";
  {
    std::ofstream(victim) << "precious\n";
  }
  auto append = [](const char* name) { os::perf_map_append(0x1000, 0x10, name); };

  // A symbolic link to root's file.
  ASSERT_TRUE(utramp::test::as_nobody([&] { return symlink(victim.c_str(), path.c_str()) == 0; }));
  append("utramp_pm_link");
  EXPECT_EQ(slurp(victim), "precious\n") << "written through nobody's symbolic link";
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  ASSERT_EQ(unlink(path.c_str()), 0);

  // A file of nobody's, open to everyone.
  ASSERT_TRUE(utramp::test::as_nobody([&] {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0666);
    return fd >= 0 && fchmod(fd, 0666) == 0 && close(fd) == 0;
  }));
  append("utramp_pm_foreign");
  EXPECT_EQ(slurp(path), "") << "written into nobody's file";
  ASSERT_EQ(unlink(path.c_str()), 0);

  // None there: made 0600, the process's own, with the line.
  const mode_t old_umask = umask(0);
  append("utramp_pm_fresh");
  umask(old_umask);
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_NE(slurp(path).find("utramp_pm_fresh"), std::string::npos);
  unlink(path.c_str());
}

}  // namespace
