#include "agent/trust.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "os/file.hpp"

namespace utramp::agent {

namespace {

// Why a directory (its fstat) cannot be written into safely: "" when the effective uid
// owns it and no one else may write it (not even with the sticky bit: another user
// could still create names in it).
std::string not_own_dir(const struct stat& st) {
  if (!S_ISDIR(st.st_mode)) return fmt::format("{}, not a directory", os::file_kind(st.st_mode));
  if (st.st_uid != geteuid()) return fmt::format("owned by uid {}, not {}", st.st_uid, geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fmt::format("writable by {} (mode {:04o})", st.st_mode & S_IWOTH ? "others" : "its group",
                       st.st_mode & 07777);
  return {};
}

// The directory part of PATH ("." for a bare name) and the rest.
std::pair<std::string, std::string> split(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

}  // namespace

Result<TrustedDir> TrustedDir::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return make_error(Errc::io, fmt::format("{}: {}", path, strerror(errno)));
  struct stat st;
  const bool ok = fstat(fd, &st) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return make_error(Errc::io, fmt::format("{}: {}", path, strerror(err)));
  if (std::string why = not_own_dir(st); !why.empty())
    return make_error(Errc::invalid_argument, fmt::format("{}: {}", path, why));
  TrustedDir d;
  // Absolute: the program may change its working directory before the next write (the
  // identity check would then refuse a relative path that names another directory).
  char* real = realpath(path.c_str(), nullptr);
  d.path_ = real ? real : path;
  free(real);
  d.dev_ = st.st_dev;
  d.ino_ = st.st_ino;
  return d;
}

Result<int> TrustedDir::open_fd() const {
  if (path_.empty()) return make_error(Errc::not_found, "no trace directory");
  const int fd = ::open(path_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return make_error(Errc::io, fmt::format("{}: {}", path_, strerror(errno)));
  struct stat st;
  std::string why;
  if (fstat(fd, &st) != 0) why = strerror(errno);
  else if (st.st_dev != dev_ || st.st_ino != ino_)
    why = "no longer the directory the configuration was read from (renamed and replaced?)";
  else why = not_own_dir(st);
  if (!why.empty()) {
    ::close(fd);
    return make_error(Errc::invalid_argument, fmt::format("{}: {}; nothing written", path_, why));
  }
  return fd;
}

bool TrustedDir::is(const std::string& dir_path) const {
  struct stat st;
  return !path_.empty() && ::stat(dir_path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_dev == dev_ &&
         st.st_ino == ino_;
}

bool TrustedDir::holds(const std::string& file_path) const { return is(split(file_path).first); }

namespace {

// CFG trusted in DIR (at DIR_PATH) when every path it names for the agent to write is
// there; SHOWN names the configuration in errors.
Result<TrustedConfig> confined(Config cfg, TrustedDir dir, const std::string& dir_path, const std::string& shown) {
  // The agent writes only into the directory the configuration came from.
  const auto outside = [&](const std::string& what, const std::string& p) {
    return make_error(Errc::invalid_argument,
                      fmt::format("{}: {} {} is not {}; refused", shown, what, p,
                                  what == "trace directory" ? dir_path : "in " + dir_path));
  };
  if (!cfg.trace_dir.empty() && !dir.is(cfg.trace_dir)) return outside("trace directory", cfg.trace_dir);
  if (!cfg.bpf_status_file.empty() && !dir.holds(cfg.bpf_status_file))
    return outside("status file", cfg.bpf_status_file);
  if (!cfg.bpf_map_file.empty() && !dir.holds(cfg.bpf_map_file))
    return outside("map file", cfg.bpf_map_file);
  return TrustedConfig{std::move(cfg), std::move(dir)};
}

}  // namespace

Result<TrustedConfig> load_trusted_config(const std::string& path) {
  const auto [dir_path, name] = split(path);
  auto dir = TrustedDir::open(dir_path);
  if (!dir)
    return make_error(dir.error().code,
                      fmt::format("agent configuration {}: its directory {}", path, dir.error().message));
  auto dfd = dir->open_fd();
  if (!dfd) return std::move(dfd).error();
  // O_NONBLOCK: a FIFO planted there must not block the open (it is refused below).
  const int fd = ::openat(*dfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  const int open_err = errno;
  ::close(*dfd);
  if (fd < 0)
    return make_error(open_err == ENOENT ? Errc::not_found : Errc::io,
                      fmt::format("agent configuration {}: {}", path,
                                  open_err == ELOOP ? "a symbolic link" : strerror(open_err)));
  struct stat st;
  std::string why = fstat(fd, &st) != 0 ? std::string(strerror(errno)) : os::not_own_file(st);
  if (why.empty() && (st.st_mode & 077)) why = fmt::format("mode {:04o}, not readable by its owner only", st.st_mode & 07777);
  std::string text;
  if (why.empty()) {
    char buf[8192];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) why = strerror(errno);
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
      if (text.size() > (16u << 20)) {
        why = "larger than 16 MiB";
        break;
      }
    }
  }
  ::close(fd);
  if (!why.empty())
    return make_error(Errc::invalid_argument, fmt::format("agent configuration {}: {}; refused", path, why));
  auto cfg = parse_config(text, path);
  if (!cfg) return std::move(cfg).error();
  return confined(std::move(*cfg), std::move(*dir), dir_path, "agent configuration " + path);
}

Result<TrustedConfig> trust_sent_config(const std::string& text) {
  auto cfg = parse_config(text, "sent over the control channel");
  if (!cfg) return std::move(cfg).error();
  const std::string dir_path = !cfg->trace_dir.empty()          ? cfg->trace_dir
                               : !cfg->bpf_status_file.empty() ? split(cfg->bpf_status_file).first
                                                               : std::string();
  const std::string shown = "the configuration sent over the control channel";
  if (dir_path.empty())
    return make_error(Errc::invalid_argument,
                      fmt::format("{} names no trace directory and no status file; refused", shown));
  // Relative to what? The process's working directory is the program's, not the sender's.
  if (dir_path[0] != '/')
    return make_error(Errc::invalid_argument,
                      fmt::format("{}: {} is not an absolute path; refused", shown, dir_path));
  auto dir = TrustedDir::open(dir_path);
  if (!dir)
    return make_error(dir.error().code, fmt::format("{}: its directory {}; refused", shown, dir.error().message));
  return confined(std::move(*cfg), std::move(*dir), dir_path, shown);
}

namespace {

Result<int> open_own_rw(int dirfd, const std::string& name, const std::string& shown) {
  const int fd = ::openat(dirfd, name.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0)
    return make_error(Errc::io, fmt::format("{}: {}", shown, errno == ELOOP ? "a symbolic link" : strerror(errno)));
  struct stat st;
  std::string why = fstat(fd, &st) != 0 ? std::string(strerror(errno)) : os::not_own_file(st);
  if (why.empty() && (st.st_mode & 077)) why = fmt::format("mode {:04o}, open to others", st.st_mode & 07777);
  if (!why.empty()) {
    ::close(fd);
    return make_error(Errc::invalid_argument, fmt::format("{}: {}; refused", shown, why));
  }
  (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// /proc/PID/fd/N, digits only: a link the kernel makes, never a file someone planted.
bool is_proc_fd_path(const std::string& path) {
  unsigned pid = 0, fd = 0;
  int end = 0;
  return std::sscanf(path.c_str(), "/proc/%u/fd/%u%n", &pid, &fd, &end) == 2 &&
         static_cast<size_t>(end) == path.size() && path.find_first_of(" +-") == std::string::npos;
}

// The ring buffers of `record` are the CLI's sealed memfd, named by its descriptor in
// /proc (trace/shm_buffers.hpp, create_anonymous). Opening that link is allowed by the
// kernel only to a process that may ptrace the CLI (the same user, or root), so it is
// followed; the file must then be ours and sealed against shrinking (a memfd has no
// name anywhere, so its mode, 0777 by birth, opens it to no one).
Result<int> open_own_memfd(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return make_error(Errc::io, fmt::format("{}: {}", path, strerror(errno)));
  struct stat st;
  std::string why;
  if (fstat(fd, &st) != 0)
    why = strerror(errno);
  else if (!S_ISREG(st.st_mode))
    why = "not a regular file";
  else if (st.st_uid != geteuid())
    why = fmt::format("owned by uid {}, not {}", st.st_uid, geteuid());
  else if (const int seals = fcntl(fd, F_GET_SEALS); seals < 0 || !(seals & F_SEAL_SHRINK))
    why = "not a sealed memfd";
  if (!why.empty()) {
    ::close(fd);
    return make_error(Errc::invalid_argument, fmt::format("{}: {}; refused", path, why));
  }
  (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace

Result<int> open_own_shared_file(const std::string& path) {
  return is_proc_fd_path(path) ? open_own_memfd(path) : open_own_rw(AT_FDCWD, path, path);
}

Result<int> open_own_shared_file(const TrustedDir& dir, const std::string& path) {
  if (!dir.holds(path)) return make_error(Errc::invalid_argument, fmt::format("{}: not in {}", path, dir.path()));
  auto dfd = dir.open_fd();
  if (!dfd) return std::move(dfd).error();
  auto fd = open_own_rw(*dfd, split(path).second, path);
  ::close(*dfd);
  return fd;
}

}  // namespace utramp::agent
