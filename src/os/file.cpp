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
