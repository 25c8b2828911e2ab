// Programs built with -finstrument-functions call __cyg_profile_func_enter(this_fn,
// call_site) after each instrumented function's prologue and __cyg_profile_func_exit
// before its return (also while an exception unwinds it). The agent defines both (the
// program's PLT binds them to the preloaded agent before glibc's empty ones), so such
// functions are traced with no site, as uftrace does: the same tracer, shadow stack,
// rings, filters and -D/-t as calls seen through images (ftrace::reported_entry).
#pragma once

#include <cstdint>
#include <vector>

namespace utramp::agent {

// Adds functions whose reports are recorded (selected by -F/-N as any other; not
// traced through a site). Published for the hooks without a lock; the agent's lock
// serialises callers.
void report_functions(const std::vector<uint64_t>& funcs);

}  // namespace utramp::agent
