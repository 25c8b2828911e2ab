#include "libraries.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "os/elf_file.hpp"

namespace utramp::cli {

std::vector<std::string> needed_libraries(const std::string& program, std::string* note) {
  std::vector<std::string> out;
  auto elf = os::ElfFile::open(program);
  if (!elf) return out;
  if (!(*elf)->has_dynamic()) {
    *note = "statically linked: no shared libraries";
    return out;
  }
  auto self = os::ElfFile::open("/proc/self/exe");
  if (!self || (*self)->interp().empty()) {
    *note = "cannot find the dynamic loader this process runs under";
    return out;
  }
  const std::string loader = (*self)->interp();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return out;
  // Only LD_LIBRARY_PATH, which changes what the program would load, is passed on.
  std::string libpath = getenv("LD_LIBRARY_PATH") ? getenv("LD_LIBRARY_PATH") : "";
  std::string envvar = "LD_LIBRARY_PATH=" + libpath;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, STDIN_FILENO);
      dup2(null, STDERR_FILENO);
    }
    char* argv[] = {const_cast<char*>(loader.c_str()), const_cast<char*>("--list"),
                    const_cast<char*>(program.c_str()), nullptr};
    char* envp[] = {libpath.empty() ? nullptr : envvar.data(), nullptr};
    execve(loader.c_str(), argv, envp);
    _exit(127);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return out;
  }
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  // Lines: "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)"
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    size_t arrow = line.find("=> /");
    if (arrow == std::string::npos) continue;
    size_t start = arrow + 3, end = line.find(" (", start);
    out.push_back(line.substr(start, end == std::string::npos ? std::string::npos : end - start));
  }
  if (out.empty() && note->empty()) *note = "the dynamic loader lists no shared libraries";
  return out;
}

}  // namespace utramp::cli
