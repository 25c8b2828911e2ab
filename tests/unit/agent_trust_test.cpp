// What the agent believes and where it writes (src/agent/trust.hpp, src/os/file.hpp):
// the configuration only from a file the user owns alone, in a directory no one else
// can write; every write relative to that directory, checked again at each use, never
// through a symbolic link. The second user is `nobody` (tests/e2e/second_user.hpp).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/config.hpp"
#include "agent/trust.hpp"
#include "os/file.hpp"
#include "second_user.hpp"
#include "temp_dir.hpp"

namespace {

using namespace utramp;
using test::as_nobody;
using test::kNobody;
using test::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void put(const std::string& path, const std::string& text, mode_t mode = 0600) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  ASSERT_EQ(chmod(path.c_str(), mode), 0);
}

// The configuration `record` writes for DIR.
std::string config_for(const std::string& dir) {
  agent::Config c;
  c.shm_path = "/dev/shm/none";
  c.trace_dir = dir;
  return agent::dump_config(c);
}

Result<agent::TrustedConfig> load(const std::string& path) { return agent::load_trusted_config(path); }

std::string error_of(const Result<agent::TrustedConfig>& r) { return r ? std::string("(accepted)") : r.error().message; }

TEST(AgentTrust, AcceptsTheConfigurationTheCliWrites) {
  TempDir tmp("utramp-trust");
  put(tmp.path + "/agent.json", config_for(tmp.path));
  auto r = load(tmp.path + "/agent.json");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->config.trace_dir, tmp.path);
  EXPECT_TRUE(r->dir.is(tmp.path));
  auto fd = r->dir.open_fd();
  ASSERT_TRUE(fd) << fd.error().message;
  close(*fd);
}

TEST(AgentTrust, RefusesWhatTheUserDoesNotOwnAlone) {
  TempDir tmp("utramp-trust");
  const std::string cfg = tmp.path + "/agent.json";
  // Readable by others.
  put(cfg, config_for(tmp.path), 0644);
  EXPECT_NE(error_of(load(cfg)).find("mode 0644"), std::string::npos) << error_of(load(cfg));
  // A second link to it (someone could read what is written through theirs).
  put(cfg, config_for(tmp.path));
  ASSERT_EQ(link(cfg.c_str(), (tmp.path + "/other").c_str()), 0);
  EXPECT_NE(error_of(load(cfg)).find("2 hard links"), std::string::npos) << error_of(load(cfg));
  unlink((tmp.path + "/other").c_str());
  // A symbolic link, even to a good file.
  put(tmp.path + "/real.json", config_for(tmp.path));
  unlink(cfg.c_str());
  ASSERT_EQ(symlink((tmp.path + "/real.json").c_str(), cfg.c_str()), 0);
  EXPECT_NE(error_of(load(cfg)).find("a symbolic link"), std::string::npos) << error_of(load(cfg));
  unlink(cfg.c_str());
  // A FIFO: refused, without waiting for a writer.
  ASSERT_EQ(mkfifo(cfg.c_str(), 0600), 0);
  EXPECT_NE(error_of(load(cfg)).find("a FIFO"), std::string::npos) << error_of(load(cfg));
  unlink(cfg.c_str());
  // The configuration names a trace directory other than its own.
  TempDir other("utramp-trust-other");
  put(cfg, config_for(other.path));
  EXPECT_NE(error_of(load(cfg)).find("is not " + tmp.path), std::string::npos) << error_of(load(cfg));
  // Its directory is writable by others.
  put(cfg, config_for(tmp.path));
  ASSERT_EQ(chmod(tmp.path.c_str(), 0777), 0);
  EXPECT_NE(error_of(load(cfg)).find("writable by others"), std::string::npos) << error_of(load(cfg));
  ASSERT_EQ(chmod(tmp.path.c_str(), 0700), 0);
  EXPECT_TRUE(load(cfg)) << error_of(load(cfg));
}

TEST(AgentTrust, RefusesAnotherUsersConfiguration) {
  if (auto why = test::no_second_user(); !why.empty()) GTEST_SKIP() << why;
  TempDir tmp("utramp-trust");
  ASSERT_EQ(chmod(tmp.path.c_str(), 0755), 0);
  const std::string mine = tmp.path + "/mine";
  ASSERT_EQ(mkdir(mine.c_str(), 0700), 0);
  // nobody's own directory and configuration, naming root's directory as the trace's.
  const std::string theirs = tmp.path + "/theirs";
  ASSERT_TRUE(test::make_nobody_dir(theirs));
  const std::string text = config_for(mine);
  ASSERT_TRUE(as_nobody([&] {
    const int fd = open((theirs + "/agent.json").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    return fd >= 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && close(fd) == 0;
  }));
  EXPECT_NE(error_of(load(theirs + "/agent.json")).find("owned by uid 65534"), std::string::npos)
      << error_of(load(theirs + "/agent.json"));
  // The same file moved into root's directory (as root could be tricked into): still not
  // root's own.
  ASSERT_EQ(rename((theirs + "/agent.json").c_str(), (mine + "/agent.json").c_str()), 0);
  EXPECT_NE(error_of(load(mine + "/agent.json")).find("owned by uid 65534, not 0"), std::string::npos)
      << error_of(load(mine + "/agent.json"));
}

// The trace directory's parent is another user's: they rename the directory away and put
// a symbolic link to a directory of root's in its place. Nothing may then be written.
TEST(AgentTrust, NothingWrittenOnceTheDirectoryWasReplaced) {
  if (auto why = test::no_second_user(); !why.empty()) GTEST_SKIP() << why;
  TempDir tmp("utramp-trust");
  ASSERT_EQ(chmod(tmp.path.c_str(), 0755), 0);
  const std::string parent = tmp.path + "/shared";
  ASSERT_TRUE(test::make_nobody_dir(parent));
  const std::string dir = parent + "/trace";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  const std::string victim = tmp.path + "/victim";
  ASSERT_EQ(mkdir(victim.c_str(), 0700), 0);
  put(dir + "/agent.json", config_for(dir));
  auto r = load(dir + "/agent.json");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(as_nobody([&] {
    return rename(dir.c_str(), (parent + "/moved").c_str()) == 0 && symlink(victim.c_str(), dir.c_str()) == 0;
  }));
  auto fd = r->dir.open_fd();
  ASSERT_FALSE(fd);
  EXPECT_NE(fd.error().message.find("no longer the directory"), std::string::npos) << fd.error().message;
  EXPECT_TRUE(std::filesystem::is_empty(victim));
}

// The one way small files are written: never through a link found at the name or at
// NAME.tmp, always 0600 whatever the umask, and a file to append to only if it is ours.
TEST(AgentTrust, WritesNeverFollowALink) {
  TempDir tmp("utramp-trust");
  const std::string victim = tmp.path + "/victim";
  put(victim, "precious\n");
  const int dfd = open(tmp.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dfd, 0);
  ASSERT_EQ(symlink(victim.c_str(), (tmp.path + "/a.json").c_str()), 0);
  ASSERT_EQ(symlink(victim.c_str(), (tmp.path + "/a.json.tmp").c_str()), 0);
  const mode_t old_umask = umask(0);
  auto w = os::write_file_at(dfd, tmp.path, "a.json", "new\n");
  umask(old_umask);
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ(slurp(victim), "precious\n");
  struct stat st;
  ASSERT_EQ(lstat((tmp.path + "/a.json").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(slurp(tmp.path + "/a.json"), "new\n");
  EXPECT_NE(access((tmp.path + "/a.json.tmp").c_str(), F_OK), 0);

  ASSERT_EQ(symlink(victim.c_str(), (tmp.path + "/agent-1.log").c_str()), 0);
  auto a = os::open_append_at(dfd, tmp.path, "agent-1.log");
  EXPECT_FALSE(a);
  ASSERT_EQ(mkfifo((tmp.path + "/agent-2.log").c_str(), 0600), 0);
  a = os::open_append_at(dfd, tmp.path, "agent-2.log");
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().message.find("a FIFO"), std::string::npos) << a.error().message;
  a = os::open_append_at(dfd, tmp.path, "agent-3.log");
  ASSERT_TRUE(a) << a.error().message;
  close(*a);
  ASSERT_EQ(stat((tmp.path + "/agent-3.log").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(slurp(victim), "precious\n");
  close(dfd);
}

// A file made with its head (the events files of a trace): it appears with the head
// whole, 0600 whatever the umask, appends after it, and a name already there (a planted
// link included) is refused, never followed or replaced.
TEST(AgentTrust, CreateWithHeadNeverReplacesOrFollows) {
  TempDir tmp("utramp-trust");
  const std::string victim = tmp.path + "/victim";
  put(victim, "precious\n");
  const int dfd = open(tmp.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dfd, 0);
  const mode_t old_umask = umask(0);
  auto fd = os::create_with_head_at(dfd, tmp.path, "e.bin", "HEAD");
  umask(old_umask);
  ASSERT_TRUE(fd) << fd.error().message;
  ASSERT_EQ(write(*fd, "tail", 4), 4);
  close(*fd);
  EXPECT_EQ(slurp(tmp.path + "/e.bin"), "HEADtail");
  struct stat st;
  ASSERT_EQ(lstat((tmp.path + "/e.bin").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_nlink, 1u);

  fd = os::create_with_head_at(dfd, tmp.path, "e.bin", "NEW");
  ASSERT_FALSE(fd);
  EXPECT_NE(fd.error().message.find("File exists"), std::string::npos) << fd.error().message;
  EXPECT_EQ(slurp(tmp.path + "/e.bin"), "HEADtail");
  ASSERT_EQ(symlink(victim.c_str(), (tmp.path + "/l.bin").c_str()), 0);
  fd = os::create_with_head_at(dfd, tmp.path, "l.bin", "NEW");
  EXPECT_FALSE(fd);
  EXPECT_EQ(slurp(victim), "precious\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(tmp.path), {}), 3) << "no temporary left";
  close(dfd);
}

}  // namespace

namespace {

// The ring buffers of `record` are the CLI's sealed memfd, which the configuration names
// as /proc/PID/fd/N (trace/shm_buffers.hpp): that link is followed (the kernel lets only
// the same user or root open it), but only to the user's own sealed memfd. Any other
// path to the rings is still opened without following a link.
TEST(AgentTrust, RingBuffersAreTheClisSealedMemfd) {
  const int sealed = memfd_create("trust-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(sealed, 0);
  ASSERT_EQ(ftruncate(sealed, 4096), 0);
  ASSERT_EQ(fcntl(sealed, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
  auto fd = agent::open_own_shared_file("/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(sealed));
  ASSERT_TRUE(fd.ok()) << fd.error().message;
  close(*fd);

  const int open_memfd = memfd_create("trust-test", MFD_CLOEXEC);
  ASSERT_GE(open_memfd, 0);
  auto refused = agent::open_own_shared_file("/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(open_memfd));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("not a sealed memfd"), std::string::npos) << refused.error().message;

  // A link elsewhere (not /proc/PID/fd/N) to the same sealed file is not followed.
  TempDir tmp("utramp-trust");
  const std::string link = tmp.path + "/rings";
  ASSERT_EQ(symlink(("/proc/self/fd/" + std::to_string(sealed)).c_str(), link.c_str()), 0);
  auto via_link = agent::open_own_shared_file(link);
  ASSERT_FALSE(via_link.ok());
  EXPECT_NE(via_link.error().message.find("symbolic link"), std::string::npos) << via_link.error().message;
  close(sealed);
  close(open_memfd);
}

// A configuration sent over the control channel (record -p) is the file's JSON, trusted
// under the file's rules with its trace directory as the directory.
TEST(AgentTrust, SentConfigurationUnderTheFilesRules) {
  TempDir tmp("utramp-trust");  // 0700, ours
  auto ok = agent::trust_sent_config(config_for(tmp.path));
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_TRUE(ok->dir.is(tmp.path));
  EXPECT_EQ(ok->config.trace_dir, tmp.path);

  // A directory others may write: refused, saying so.
  ASSERT_EQ(chmod(tmp.path.c_str(), 0777), 0);
  EXPECT_NE(error_of(agent::trust_sent_config(config_for(tmp.path))).find("writable by others"), std::string::npos);
  ASSERT_EQ(chmod(tmp.path.c_str(), 0700), 0);

  // A file to write outside it.
  agent::Config c;
  c.shm_path = "/dev/shm/none";
  c.trace_dir = tmp.path;
  c.bpf_map_file = "/tmp/elsewhere/maps";
  EXPECT_NE(error_of(agent::trust_sent_config(agent::dump_config(c))).find("map file /tmp/elsewhere/maps is not in"),
            std::string::npos);
  // No directory at all, a relative one, text that is not the format.
  c.bpf_map_file.clear();
  c.trace_dir.clear();
  EXPECT_NE(error_of(agent::trust_sent_config(agent::dump_config(c))).find("names no trace directory"),
            std::string::npos);
  c.trace_dir = "trace";
  EXPECT_NE(error_of(agent::trust_sent_config(agent::dump_config(c))).find("not an absolute path"), std::string::npos);
  EXPECT_NE(error_of(agent::trust_sent_config("{\"trace_dir\": 3")).find("control channel"), std::string::npos);
}

// Another user's directory: refused (needs root, to make one).
TEST(AgentTrust, SentConfigurationInAnotherUsersDirectory) {
  if (const std::string why = test::no_second_user(); !why.empty()) GTEST_SKIP() << why;
  TempDir tmp("utramp-trust");
  const std::string theirs = tmp.path + "/theirs";
  ASSERT_EQ(mkdir(theirs.c_str(), 0700), 0);
  ASSERT_EQ(chown(theirs.c_str(), kNobody, kNobody), 0);
  EXPECT_NE(error_of(agent::trust_sent_config(config_for(theirs))).find("owned by uid 65534"), std::string::npos);
}

}  // namespace
