#include "os/file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace utramp::os {

const char* file_kind(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
  }
  return "not a regular file";
}

std::string not_own_file(const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return file_kind(st.st_mode);
  if (st.st_uid != geteuid()) return fmt::format("owned by uid {}, not {}", st.st_uid, geteuid());
  if (st.st_nlink != 1) return fmt::format("{} hard links", st.st_nlink);
  return {};
}

namespace {

std::string shown(const std::string& dir, const std::string& name) {
  return dir.empty() || name.starts_with('/') ? name : dir + "/" + name;
}

}  // namespace

size_t write_some(int fd, const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < len) {
    const ssize_t n = ::write(fd, p + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;
      break;
    }
    done += static_cast<size_t>(n);
  }
  return done;
}

bool write_all(int fd, std::string_view text) { return write_some(fd, text.data(), text.size()) == text.size(); }

Result<void> write_file_at(int dirfd, const std::string& dir_shown, const std::string& name, std::string_view text) {
  const std::string tmp = name + ".tmp";
  // Whatever is at NAME.tmp (a link planted there, or our own left by a write that was
  // cut) goes: O_EXCL below then creates a file that is ours alone.
  (void)::unlinkat(dirfd, tmp.c_str(), 0);
  const int fd = ::openat(dirfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return make_error(Errc::io, fmt::format("{}: {}", shown(dir_shown, tmp), strerror(errno)));
  // fchmod: 0600 whatever the umask (it can only take bits away, but be explicit).
  const bool ok = ::fchmod(fd, 0600) == 0 && write_all(fd, text);
  const int err = errno;
  ::close(fd);
  if (!ok) {
    (void)::unlinkat(dirfd, tmp.c_str(), 0);
    return make_error(Errc::io, fmt::format("{}: {}", shown(dir_shown, tmp), strerror(err)));
  }
  if (::renameat(dirfd, tmp.c_str(), dirfd, name.c_str()) != 0) {
    const int e = errno;
    (void)::unlinkat(dirfd, tmp.c_str(), 0);
    return make_error(Errc::io, fmt::format("{}: {}", shown(dir_shown, name), strerror(e)));
  }
  return {};
}

Result<int> create_with_head_at(int dirfd, const std::string& dir_shown, const std::string& name,
                                std::string_view head) {
  std::string tmp;  // the named temporary of file systems without O_TMPFILE
  int fd = ::openat(dirfd, ".", O_WRONLY | O_APPEND | O_TMPFILE | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    tmp = name + ".tmp";
    (void)::unlinkat(dirfd, tmp.c_str(), 0);  // ours, left by a write that was cut, or a planted link
    fd = ::openat(dirfd, tmp.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  }
  if (fd < 0) {
    const int err = errno;
    Result<int> e = make_error(Errc::io, fmt::format("{}: {}", shown(dir_shown, name), strerror(err)));
    errno = err;
    return e;
  }
  auto fail = [&](int err) -> Result<int> {
    ::close(fd);
    if (!tmp.empty()) (void)::unlinkat(dirfd, tmp.c_str(), 0);
    Result<int> e = make_error(Errc::io, fmt::format("{}: {}", shown(dir_shown, name), strerror(err)));
    errno = err;
    return e;
  };
  // fchmod: 0600 whatever the umask (it can only take bits away, but be explicit).
  if (::fchmod(fd, 0600) != 0 || !write_all(fd, head)) return fail(errno);
  int linked;
  if (tmp.empty()) {
    // An unnamed file gets its name through /proc/self/fd (AT_EMPTY_PATH would need
    // CAP_DAC_READ_SEARCH); without /proc mounted, through AT_EMPTY_PATH after all.
    const std::string self = fmt::format("/proc/self/fd/{}", fd);
    linked = ::linkat(AT_FDCWD, self.c_str(), dirfd, name.c_str(), AT_SYMLINK_FOLLOW);
    if (linked != 0 && errno == ENOENT) linked = ::linkat(fd, "", dirfd, name.c_str(), AT_EMPTY_PATH);
  } else {
    linked = ::linkat(dirfd, tmp.c_str(), dirfd, name.c_str(), 0);
  }
  if (linked != 0) return fail(errno);  // EEXIST: NAME is there already
  if (!tmp.empty()) (void)::unlinkat(dirfd, tmp.c_str(), 0);
  return fd;
}

Result<int> open_append_at(int dirfd, const std::string& dir_shown, const std::string& name) {
  const std::string path = shown(dir_shown, name);
  // O_NONBLOCK: a FIFO must not block the open (it is refused below); O_NOCTTY: a
  // terminal never becomes ours.
  constexpr int kFlags = O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  int fd = ::openat(dirfd, name.c_str(), kFlags);
  if (fd < 0 && errno == ENOENT) {
    fd = ::openat(dirfd, name.c_str(), kFlags | O_CREAT | O_EXCL, 0600);
    if (fd >= 0 && ::fchmod(fd, 0600) != 0) {
      const int e = errno;
      ::close(fd);
      return make_error(Errc::io, fmt::format("{}: {}", path, strerror(e)));
    }
  }
  if (fd < 0) {
    const int e = errno;
    struct stat st;
    // ELOOP: a symbolic link; ENXIO: a FIFO no one reads. Say what is there.
    if ((e == ELOOP || e == ENXIO) && ::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
      return make_error(Errc::invalid_argument, fmt::format("{}: {}; not written", path, file_kind(st.st_mode)));
    return make_error(Errc::io, fmt::format("{}: {}", path, strerror(e)));
  }
  struct stat st;
  std::string why = ::fstat(fd, &st) != 0 ? std::string(strerror(errno)) : not_own_file(st);
  if (!why.empty()) {
    ::close(fd);
    return make_error(Errc::invalid_argument, fmt::format("{}: {}; not written", path, why));
  }
  (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

Result<int> open_regular(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return make_error(e == ENOENT ? Errc::not_found : Errc::io, fmt::format("{}: cannot open: {}", path, strerror(e)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const mode_t mode = st.st_mode;
    ::close(fd);
    return make_error(Errc::bad_format, fmt::format("{}: {}, not a regular file", path, file_kind(mode)));
  }
  (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

Result<std::vector<uint8_t>> read_regular(const std::string& path, uint64_t max_bytes) {
  auto fd = open_regular(path);
  if (!fd) return std::move(fd).error();
  struct stat st;
  if (fstat(*fd, &st) != 0 || static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(*fd);
    return make_error(Errc::too_big, fmt::format("{}: {} bytes, more than the {} read at most", path,
                                                 static_cast<uint64_t>(st.st_size), max_bytes));
  }
  std::vector<uint8_t> out(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = pread(*fd, out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // shrank since fstat: what is there
    got += static_cast<size_t>(n);
  }
  ::close(*fd);
  out.resize(got);
  return out;
}

}  // namespace utramp::os
