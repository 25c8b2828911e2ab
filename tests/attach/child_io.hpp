// What the attach tests do with a child they started on pipes: read one line of its
// output, or the rest of it, and reap it into an exit code (128 + N for a signal death);
// and read a file whole.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>

namespace utramp::test {

inline std::string read_line(int fd) {
  std::string line;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

// Everything left to read on FD, until its end.
inline std::string read_rest(int fd) {
  std::string rest;
  char buf[512];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) rest.append(buf, static_cast<size_t>(n));
  return rest;
}

// The whole of a file ("" when it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits for `pid` and sets it to -1.
inline int reap_child(pid_t& pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  pid = -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

}  // namespace utramp::test
