// Opening the files a user names, for reading: the one place that decides what may be
// read. Only regular files are: a FIFO blocks the open (and then the read) until another
// process writes, a device such as /dev/zero never ends, a directory is not a file. The
// open itself never blocks (O_NONBLOCK until the file is known to be regular) and never
// makes a terminal the caller's.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace utramp::os {

// A descriptor (O_RDONLY, O_CLOEXEC, blocking again) of the regular file at `path`, or an
// error naming the path and what it is instead ("a FIFO", "a directory"...).
Result<int> open_regular(const std::string& path);

// The whole regular file, refused (Errc::too_big) beyond `max_bytes`.
Result<std::vector<uint8_t>> read_regular(const std::string& path, uint64_t max_bytes);

// "a directory", "a FIFO", "a character device"... for a file type from stat.
const char* file_kind(mode_t mode);

}  // namespace utramp::os
