// perf's map of JIT-ed code, /tmp/perf-PID.map: one "START SIZE name" line (hex, no 0x)
// per generated image, which `perf report` uses to name samples in code that no ELF file
// describes. Written by whoever publishes an image (tramp/), after the image's bytes are
// final; lines are never removed (perf maps are append-only).
//
// /tmp/perf-PID.map is a name anyone can create in /tmp before this process exists. perf
// reads the file only when the user running it, or root, owns it; so it must be the
// process's own: created 0600 without following a symbolic link, or, when another JIT
// of the process made it first, appended to only as a regular file of the same user
// with one link (open_append_at, os/file.hpp). A link, FIFO or another user's file
// planted at the name gets nothing.
#pragma once

#include <cstdint>
#include <string_view>

namespace utramp::os {

// Default: on when the environment has UTRAMP_PERF_MAP=1 (read once, at the first
// question); set_perf_map() overrides it.
void set_perf_map(bool on);
bool perf_map_enabled();

// Appends one line for [start, start+size) named `name` (newlines and NULs in it become
// '_'). One O_APPEND write per line, the file opened per line (a forked child writes its
// own pid's file): lines of concurrent writers never interleave. A failure is ignored:
// the map is a courtesy to perf. Not for hit paths (it allocates and opens a file).
void perf_map_append(uint64_t start, uint64_t size, std::string_view name);

}  // namespace utramp::os
