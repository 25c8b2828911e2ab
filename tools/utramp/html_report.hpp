// `utramp report --html`: one self-contained page (inline CSS, script and SVG; nothing
// fetched) with the recording's metadata (what `info` shows), the losses, the flame
// graph (flame.hpp), each thread's outermost calls over time, and the per-function
// table of `report` (function_stats.hpp), sortable by clicking a column's header.
#pragma once

#include <string>

#include "trace_walk.hpp"

namespace utramp::cli {

// The page for the threads SELECTION names, names shown in STYLE. One walk of the trace.
std::string html_report(const trace::TraceReader& r, const ThreadSelection& selection,
                        symbols::Style style);

}  // namespace utramp::cli
