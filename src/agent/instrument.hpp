// Programs built with -finstrument-functions call __cyg_profile_func_enter(this_fn,
// call_site) after each instrumented function's prologue and __cyg_profile_func_exit
// before its return (also while an exception unwinds it). The agent defines both (the
// program's PLT binds them to the preloaded agent before glibc's empty ones), so such
// functions are traced with no site, as uftrace does: the same tracer, shadow stack,
// rings, filters and -D/-t as calls seen through images (ftrace::reported_entry).
#pragma once

#include <cstdint>
#include <vector>

#include "ftrace/graph.hpp"

namespace utramp::agent {

// A function whose reports are recorded, and the scope it opens (record -F/-N).
struct Reported {
  uint64_t func;
  ftrace::Scope scope;
};

// Adds functions whose reports are recorded (selected by --only/--skip as any other;
// not traced through a site). Published for the hooks without a lock; the agent's lock
// serialises callers.
void report_functions(const std::vector<Reported>& funcs);

}  // namespace utramp::agent
