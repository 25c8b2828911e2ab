// The C library of a process: glibc's objects and the dynamic loader.
#pragma once

#include <string_view>

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

}  // namespace utramp::os
