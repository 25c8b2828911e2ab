// Debian ships asmjit only as a static archive built without -fPIC. Its one reference
// to a symbol outside itself that a shared library cannot reach PC-relatively is
// `stderr` (asmjit's debug output). The link wraps it (-Wl,--wrap=stderr): references
// resolve to this library-local copy, set from the real one before anything runs.
#include <cstdio>

#include "common/init.hpp"

extern "C" {
extern FILE* __real_stderr;
__attribute__((visibility("hidden"))) FILE* __wrap_stderr = nullptr;
}

namespace {
__attribute__((constructor(UTRAMP_INIT_GLUE))) void init_wrapped_stderr() { __wrap_stderr = __real_stderr; }
}  // namespace
