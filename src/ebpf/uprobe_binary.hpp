// Where a uprobe's BINARY points (`uprobe/BINARY:FUNC`, `uretprobe/BINARY:FUNC`, `--attach
// PROG=uprobe:BINARY:FUNC[+OFF]`): the traced program or a shared library. One
// definition for the CLI (which finds FUNC in the file and checks OFF before the target
// starts) and the agent (which finds the library among the objects the target has loaded,
// at start-up or when a dlopen loads it).
//
//   "", "*", "/proc/self/exe", the program's path or file name    the traced program
//   a path (with a '/') whose file name has ".so"                 that library file
//   a file name or soname with ".so" (libc.so.6, libz.so)         looked for as libbpf
//        does: each directory of LD_LIBRARY_PATH, then the directory the C library was
//        loaded from (Debian's multiarch directory), /lib64, /usr/lib64, /lib, /usr/lib
//
// Anything else is refused, saying what BINARY may be. A library is matched with a loaded
// object by file (device and inode: a symbolic link or another path to it matches), or by
// the object's file name when BINARY is a bare name (a library the target finds through
// its RUNPATH). Programs on a library the target has not loaded wait for it; see
// docs/ebpf.md, "Uprobes in shared libraries".
#pragma once

#include <string>
#include <string_view>

#include "common/result.hpp"

namespace utramp::ebpf {

struct UprobeBinary {
  bool library = false;  // false: the traced program
  std::string given;     // BINARY as written
  std::string path;      // a library's file, found (empty for the traced program)
};

// `program` is the traced program's path (the CLI's resolved target; the agent passes
// /proc/self/exe's target).
Result<UprobeBinary> resolve_uprobe_binary(std::string_view binary, const std::string& program);

// Whether a loaded object (its path as the loader reports it) is the library `b` names.
bool is_library(const UprobeBinary& b, const std::string& loaded_path);

}  // namespace utramp::ebpf
