// Opening the files a user names, for reading: the one place that decides what may be
// read. Only regular files are: a FIFO blocks the open (and then the read) until another
// process writes, a device such as /dev/zero never ends, a directory is not a file. The
// open itself never blocks (O_NONBLOCK until the file is known to be regular) and never
// makes a terminal the caller's.
//
// And the one way utramp's runtime writes a file in a directory another user may be
// able to write (the trace directory's parent, /tmp): relative to a descriptor of the
// directory, never through a symbolic link, created 0600 whatever the umask, and a file
// already there used only when it is the user's own (docs/tracing.md, "What the agent
// trusts").
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
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

// Why a file (its fstat) is not one the effective uid may use as its own: "" when it
// is a regular file owned by the effective uid with one link; else "a FIFO", "owned by
// uid 65534, not 0", "2 hard links" (someone else holds another name for it).
std::string not_own_file(const struct stat& st);

// Writes LEN bytes at FD's position, again after EINTR and short writes; returns how
// many were written (LEN, or fewer with errno set: ENOSPC when write returned 0).
size_t write_some(int fd, const void* data, size_t len);
// write_some of all of TEXT; false (errno set) when not all of it was written.
bool write_all(int fd, std::string_view text);

// Writes TEXT whole as NAME in the directory DIRFD (DIR_SHOWN in messages; AT_FDCWD
// with NAME a path is allowed): to NAME.tmp, created anew (O_EXCL, O_NOFOLLOW; whatever
// was left at that name, a symbolic link included, is removed first, never followed),
// mode 0600, then renamed over NAME (a link at NAME is replaced, not followed). A reader
// never sees half of it.
Result<void> write_file_at(int dirfd, const std::string& dir_shown, const std::string& name, std::string_view text);

// A new file NAME in DIRFD (DIR_SHOWN in messages) that begins with HEAD, mode 0600,
// and a descriptor (O_WRONLY | O_APPEND, O_CLOEXEC) to append the rest. NAME appears only
// once HEAD is whole in it: the file is made unnamed (O_TMPFILE) and linked in after the
// write, so a reader, or a process killed at any instant, never leaves it empty or with
// half of HEAD. Refused (Errc::io, with EEXIST's text) when NAME is there already, as
// O_EXCL would. Where the file system has no O_TMPFILE, the file is written as NAME.tmp
// (created anew, O_EXCL, O_NOFOLLOW) and linked to NAME. On failure errno is the cause's.
Result<int> create_with_head_at(int dirfd, const std::string& dir_shown, const std::string& name,
                                std::string_view head);

// A descriptor (O_WRONLY | O_APPEND, O_CLOEXEC) of NAME in DIRFD to append to: created
// 0600 when absent, else used only when not_own_file() finds nothing wrong (a symbolic
// link, FIFO or another user's file is refused, never opened for writing).
Result<int> open_append_at(int dirfd, const std::string& dir_shown, const std::string& name);

}  // namespace utramp::os
