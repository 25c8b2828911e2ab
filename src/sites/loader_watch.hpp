// The dynamic loader's changes of its list of objects, as a debugger learns them.
//
// The loader announces every change through the r_debug protocol of <link.h>: it sets
// r_debug.r_state (RT_ADD or RT_DELETE), calls the function at r_debug.r_brk
// (_dl_debug_state, an empty function), makes the change, sets RT_CONSISTENT and calls
// r_brk again. A dlopen announces RT_CONSISTENT after mapping the new objects and before
// relocating them or running any of their code; a dlclose, after unmapping. Debuggers
// put a breakpoint on r_brk. Here r_brk is patched into a jump to a hook (its `ret` is
// followed by alignment padding, which takes the rest of the jump), so the hook runs on
// the thread that loads or unloads, synchronously, before the new code can run — for
// dlopen, dlmopen and the loads glibc makes itself (NSS, iconv) alike.
//
// Nothing needs interposing: the program's dlopen is called by the program (an
// interposed dlopen was seen by the loader as called from the interposer, whose
// RUNPATH and $ORIGIN then applied instead of the caller's).
//
// The hook runs with the loader's locks held (dl_load_lock, and dl_load_tls_lock in
// glibc >= 2.35). So the callback must not wait for a lock that is held elsewhere
// while its holder calls into the loader (dlopen, dlsym, dladdr, pthread_create...):
// utramp's lock order puts the loader's locks first (docs/architecture.md, "Locks").
#pragma once

#include "common/result.hpp"

namespace utramp::sites {

enum class LoaderState : int { consistent = 0, add = 1, remove = 2 };  // RT_* of <link.h>

using LoaderCallback = void (*)(LoaderState state);

// Installs the hook; `callback` runs at every announcement. Once per process (a second
// call replaces the callback). Errc::unsupported, with the bytes seen, when r_brk is
// not the empty function followed by padding that this expects (nothing is changed).
Result<void> watch_loader(LoaderCallback callback);
// Puts r_brk's bytes back (the hook no longer runs; a thread inside it finishes). Nothing
// when it was not installed.
Result<void> unwatch_loader();

}  // namespace utramp::sites
