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

template <class F>
Result<void> ProcessFiles::in_dir(F f) const {
  if (!dir_ || dir_->empty()) return {};
  auto dfd = dir_->open_fd();
  if (!dfd) return std::move(dfd).error();
  auto r = f(*dfd);
  close(*dfd);
  return r;
}

Result<void> ProcessFiles::started(const TrustedDir* dir) {
  dir_ = dir;
  const uint32_t pid = own_pid();
  const uint64_t now = arch::cycles();
  return in_dir([&](int dfd) -> Result<void> {
    const std::string& path = dir_->path();
    Result<void> kept;
    if (auto before = trace::read_process_file(dfd, path, pid);
        before && before->end_time == 0 && before->exit.empty()) {
      // An exec: the same process runs another program. The one before keeps its files
      // as image N (the index it has in "images").
      process_ = std::move(*before);
      if (process_.images.empty()) process_.images.push_back({process_.start_time, process_.command});
      kept = trace::keep_image_files(dfd, path, pid, static_cast<uint32_t>(process_.images.size() - 1));
    } else {
      process_ = {};
      process_.pid = pid;
      process_.start_time = now;
      const auto ppid = static_cast<uint32_t>(getppid());
      if (trace::read_process_file(dfd, path, ppid)) process_.parent = ppid;
    }
    process_.command = own_command();
    process_.images.push_back({now, process_.command});
    auto written = trace::write_process_file(dfd, path, process_);
    return !kept ? kept : written;
  });
}

Result<void> ProcessFiles::forked() {
  if (!dir_ || dir_->empty()) return {};
  process_.parent = process_.pid;
  process_.pid = own_pid();
  process_.start_time = arch::cycles();
  process_.end_time = 0;
  process_.exit.clear();
  // One program: its parent's at the fork.
  process_.images = {{process_.start_time, process_.command}};
  // Each file is written even when another could not be; the first error is returned.
  auto process = in_dir([&](int dfd) { return trace::write_process_file(dfd, dir_->path(), process_); });
  auto functions = write_functions();
  functions_written_ = functions.ok();  // the child's own file
  auto maps = write_maps();
  return !process ? process : !functions ? functions : maps;
}

Result<void> ProcessFiles::exiting(int status) {
  // A child that forked without our atfork handler (vfork, clone) is not this process.
  if (process_.pid != own_pid()) return {};
  process_.end_time = arch::cycles();
  process_.exit = trace::exit_description(W_EXITCODE(status & 0xff, 0));
  return in_dir([&](int dfd) { return trace::write_process_file(dfd, dir_->path(), process_); });
}

Result<void> ProcessFiles::traced(std::vector<trace::Function> more) {
  // Nothing new (start-up's library calls when none are hooked): the file says it
  // already; each rewrite is a rename over it, which ext4 flushes (auto_da_alloc).
  if (more.empty() && functions_written_) return {};
  functions_.insert(functions_.end(), std::make_move_iterator(more.begin()),
                    std::make_move_iterator(more.end()));
  auto r = write_functions();
  functions_written_ = functions_written_ || r.ok();
  return r;
}

Result<void> ProcessFiles::write_functions() const {
  return in_dir([&](int dfd) { return trace::write_functions_file(dfd, dir_->path(), own_pid(), functions_); });
}

Result<void> ProcessFiles::write_maps() const {
  return in_dir([&](int dfd) { return trace::write_maps_file(dfd, dir_->path(), own_pid(), read_proc("/proc/self/maps")); });
}

}  // namespace utramp::agent
