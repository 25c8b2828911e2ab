// A second user for tests of what another user can do to utramp's files: `nobody`
// (uid and gid 65534) plants symbolic links and files, or renames directories, in a
// directory it may write. Acting as it needs root; tests skip with that reason without.
#pragma once

#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace utramp::test {

inline constexpr uid_t kNobody = 65534;

// Why the tests of a second user cannot run here ("" when they can).
inline std::string no_second_user() {
  return geteuid() == 0 ? std::string() : "needs root, to act as a second user (nobody)";
}

// Runs F in a child process as nobody (no supplementary groups); true when F returned
// true. F runs after fork: it should do little more than system calls.
template <class F>
bool as_nobody(F f) {
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setresgid(kNobody, kNobody, kNobody) != 0 ||
        setresuid(kNobody, kNobody, kNobody) != 0)
      _exit(2);
    _exit(f() ? 0 : 1);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0) {
  }
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// A directory at PATH that nobody owns and may write (0755): another user's directory,
// or one it can write, where root then works.
inline bool make_nobody_dir(const std::string& path) {
  return mkdir(path.c_str(), 0755) == 0 && chown(path.c_str(), kNobody, kNobody) == 0;
}

}  // namespace utramp::test
