// Reading memory of this process that may not be mapped, without a signal.
//
// process_vm_readv on our own pid: the kernel does the copy, and an unmapped or
// unreadable source gives EFAULT instead of SIGSEGV. A copy is all or nothing here: a
// partial read (the source crosses into an unmapped page) counts as a failure. Where the
// system call is refused (seccomp, ENOSYS), the same copy goes through a pipe: write()
// from the source fails with EFAULT just the same.
//
// Async-signal-safe; no allocation; usable from generated code's slow paths and helpers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace utramp::os {

// Copies `len` bytes from address `src` of this process into `dst`; false (and `dst`
// zeroed) if any byte of the source cannot be read.
bool safe_read(void* dst, uint64_t src, size_t len) noexcept;

}  // namespace utramp::os
