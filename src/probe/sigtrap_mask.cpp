#include "probe/sigtrap_mask.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace utramp::probe {

namespace {

// A small /proc file whole; "" when it cannot be read (the thread ended meanwhile).
std::string read_small(const std::string& path) {
  std::string text;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return text;
}

// The value of "KEY:\t..." in a status file, "" when absent.
std::string field(const std::string& status, const char* key) {
  const std::string k = std::string(key) + ":";
  size_t at = 0;
  if (status.starts_with(k)) at = k.size();
  else if ((at = status.find("\n" + k)) != std::string::npos) at += 1 + k.size();
  else return {};
  while (at < status.size() && (status[at] == '\t' || status[at] == ' ')) ++at;
  return status.substr(at, status.find('\n', at) - at);
}

// Whether the thread waits in a system call that installed a mask for the wait only.
bool waits_with_temporary_mask(const std::string& task_dir) {
  const std::string text = read_small(task_dir + "/syscall");
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;  // "running", or unreadable
  const long nr = std::strtol(text.c_str(), nullptr, 10);
  return nr == SYS_rt_sigsuspend || nr == SYS_pselect6 || nr == SYS_ppoll || nr == SYS_epoll_pwait
#ifdef SYS_epoll_pwait2
         || nr == SYS_epoll_pwait2
#endif
      ;
}

}  // namespace

Result<std::vector<BlockingThread>> threads_blocking_sigtrap(pid_t pid) {
  const std::string proc = pid ? fmt::format("/proc/{}/task", pid) : std::string("/proc/self/task");
  DIR* d = ::opendir(proc.c_str());
  if (!d) return make_error(Errc::io, fmt::format("{}: {}", proc, strerror(errno)));
  std::vector<BlockingThread> out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string dir = proc + "/" + e->d_name;
    const std::string status = read_small(dir + "/status");
    const std::string blk = field(status, "SigBlk");
    if (blk.empty()) continue;
    const uint64_t mask = std::strtoull(blk.c_str(), nullptr, 16);
    if (!(mask & (uint64_t{1} << (SIGTRAP - 1)))) continue;
    if (waits_with_temporary_mask(dir)) continue;
    out.push_back({static_cast<uint32_t>(std::strtoul(e->d_name, nullptr, 10)), field(status, "Name"), mask});
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.tid < b.tid; });
  return out;
}

Result<bool> sigtrap_pending() {
  const std::string proc = "/proc/self/task";
  DIR* d = ::opendir(proc.c_str());
  if (!d) return make_error(Errc::io, fmt::format("{}: {}", proc, strerror(errno)));
  bool pending = false;
  while (dirent* e = ::readdir(d)) {
    if (pending) break;
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string status = read_small(proc + "/" + e->d_name + "/status");
    for (const char* key : {"SigPnd", "ShdPnd"})
      if (const std::string v = field(status, key); !v.empty())
        pending = pending || (std::strtoull(v.c_str(), nullptr, 16) >> (SIGTRAP - 1)) & 1;
  }
  ::closedir(d);
  return pending;
}

Result<std::vector<BlockingThread>> threads_keeping_sigtrap_blocked() {
  auto seen = threads_blocking_sigtrap();
  for (int look = 1; look < 5 && seen && !seen->empty(); ++look) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    auto now = threads_blocking_sigtrap();
    if (!now) return now;
    std::erase_if(*seen, [&](const BlockingThread& t) {
      return std::none_of(now->begin(), now->end(), [&](const BlockingThread& n) { return n.tid == t.tid; });
    });
  }
  return seen;
}

std::string describe(const std::vector<BlockingThread>& threads) {
  std::string out;
  for (const auto& t : threads)
    out += fmt::format("{}thread {} ({}, SigBlk {:016x})", out.empty() ? "" : ", ", t.tid, t.name, t.sigblk);
  return out;
}

}  // namespace utramp::probe
