// The shared libraries a program would load, as the dynamic loader resolves them: for
// `list --libs` and `hist --libs`, which look at a program's functions before it runs.
#pragma once

#include <string>
#include <vector>

namespace utramp::cli {

// The shared libraries the dynamic loader would map for `program`, as `ld.so --list`
// resolves them. The loader is the one this process runs under, never one the file
// names (a file's PT_INTERP could be any program), and in list mode it maps the objects
// and exits without running any of their code. Executing the program itself with
// LD_TRACE_LOADED_OBJECTS set, as ldd does, would run a statically linked program and
// crash a shared library. `note` says why the list is empty when it is for a reason.
std::vector<std::string> needed_libraries(const std::string& program, std::string* note);

}  // namespace utramp::cli
