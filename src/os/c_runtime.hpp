// The C library of a process: glibc's objects and the dynamic loader.
#pragma once

#include <string>
#include <string_view>

#include "os/text_writer.hpp"

namespace utramp::os {

// Whether PATH is glibc's (libc.so.6; libpthread.so.0 before glibc 2.34) or the dynamic
// loader (ld-linux*). glibc runs its own functions with every signal blocked: a new
// thread until it sets its mask (__ctype_init, _setjmp), an ending thread (getpagesize,
// madvise, free, munmap), the children of posix_spawn and vfork (dup2, close, execve...).
// A thread that reaches an int3 while it blocks SIGTRAP is ended with its process by the
// kernel, so utramp puts no int3 in this code, even for a patch batch's microseconds:
// it is changed only while no other thread runs (start-up). docs/sites.md, "The C
// library while threads run".
// Why: the end of the refusals of a change there while other threads run.
inline constexpr const char* kCRuntimeWhy =
    "the C library runs its own functions with every signal blocked (a thread's start and end, "
    "posix_spawn's and vfork's children), where an int3, even a patch's for microseconds, would end the process";

inline bool c_runtime_object(std::string_view path) noexcept {
  const std::string_view base = path.substr(path.rfind('/') + 1);
  return base.starts_with("libc.so") || base.starts_with("libc-2.") || base.starts_with("libpthread.so") ||
         base.starts_with("libpthread-2.") || base.starts_with("ld-linux");
}

// Why code of OBJECT may not be changed now (empty: it may): it is the C library's and
// other threads run (or their count cannot be had). The one rule for sites and probes.
inline std::string c_runtime_change_refused(std::string_view object) {
  if (!c_runtime_object(object)) return {};
  auto threads = thread_count();
  if (threads && *threads == 1) return {};
  return std::string(object) + " while other threads run: " + kCRuntimeWhy;
}

}  // namespace utramp::os
