#include "agent/process_files.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "arch/cpu.hpp"

namespace utramp::agent {

namespace {

uint32_t own_pid() { return static_cast<uint32_t>(getpid()); }

// A small /proc file whole ("" when it cannot be read).
std::string read_proc(const char* path) {
  std::string text;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buf[8192];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fd);
  return text;
}

std::vector<std::string> own_command() {
  const std::string text = read_proc("/proc/self/cmdline");  // NUL-terminated arguments
  std::vector<std::string> argv;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = std::min(text.find('\0', pos), text.size());
    argv.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return argv;
}

}  // namespace

Result<void> ProcessFiles::started(const std::string& dir) {
  dir_ = dir;
  if (dir_.empty()) return {};
  const uint32_t pid = own_pid();
  if (auto before = trace::read_process_file(dir_, pid);
      before && before->end_time == 0 && before->exit.empty()) {
    process_ = std::move(*before);
  } else {
    process_ = {};
    process_.pid = pid;
    process_.start_time = arch::cycles();
    const auto ppid = static_cast<uint32_t>(getppid());
    if (trace::read_process_file(dir_, ppid)) process_.parent = ppid;
  }
  process_.command = own_command();
  return trace::write_process_file(dir_, process_);
}

Result<void> ProcessFiles::forked() {
  if (dir_.empty()) return {};
  process_.parent = process_.pid;
  process_.pid = own_pid();
  process_.start_time = arch::cycles();
  process_.end_time = 0;
  process_.exit.clear();
  // Each file is written even when another could not be; the first error is returned.
  auto process = trace::write_process_file(dir_, process_);
  auto functions = write_functions();
  auto maps = write_maps();
  return !process ? process : !functions ? functions : maps;
}

Result<void> ProcessFiles::exiting(int status) {
  // A child that forked without our atfork handler (vfork, clone) is not this process.
  if (dir_.empty() || process_.pid != own_pid()) return {};
  process_.end_time = arch::cycles();
  process_.exit = trace::exit_description(W_EXITCODE(status & 0xff, 0));
  return trace::write_process_file(dir_, process_);
}

Result<void> ProcessFiles::traced(std::vector<trace::Function> more) {
  functions_.insert(functions_.end(), std::make_move_iterator(more.begin()),
                    std::make_move_iterator(more.end()));
  return write_functions();
}

Result<void> ProcessFiles::write_functions() const {
  if (dir_.empty()) return {};
  return trace::write_functions_file(dir_, own_pid(), functions_);
}

Result<void> ProcessFiles::write_maps() const {
  if (dir_.empty()) return {};
  return trace::write_maps_file(dir_, own_pid(), read_proc("/proc/self/maps"));
}

}  // namespace utramp::agent
