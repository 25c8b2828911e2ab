#include "ebpf/uprobe_binary.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <vector>

namespace utramp::ebpf {

namespace {

std::string_view base_name(std::string_view p) { return p.substr(p.rfind('/') + 1); }

bool names_library(std::string_view name) {
  const std::string_view b = base_name(name);
  return b.ends_with(".so") || b.find(".so.") != std::string_view::npos;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

bool is_regular(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The directory this process's C library came from: the distribution's directory of
// libraries for this architecture (Debian: /lib/x86_64-linux-gnu), named without
// knowing the architecture. dladdr asks the loader: called with no utramp lock held
// (the CLI, or the agent before main).
std::string libc_dir() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&fopen), &info) || !info.dli_fname) return {};
  const std::string_view f = info.dli_fname;
  const size_t slash = f.rfind('/');
  return slash == std::string_view::npos ? std::string() : std::string(f.substr(0, slash));
}

std::vector<std::string> search_dirs() {
  std::vector<std::string> dirs;
  if (const char* llp = getenv("LD_LIBRARY_PATH"))
    for (std::string_view rest = llp; !rest.empty();) {
      const size_t colon = rest.find(':');
      std::string_view d = rest.substr(0, colon);
      if (!d.empty()) dirs.emplace_back(d);
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    }
  if (std::string d = libc_dir(); !d.empty()) dirs.push_back(std::move(d));
  for (const char* d : {"/lib64", "/usr/lib64", "/lib", "/usr/lib"}) dirs.emplace_back(d);
  return dirs;
}

}  // namespace

Result<UprobeBinary> resolve_uprobe_binary(std::string_view binary, const std::string& program) {
  UprobeBinary b;
  b.given = std::string(binary);
  if (binary.empty() || binary == "*" || binary == "/proc/self/exe" || binary == program ||
      base_name(binary) == base_name(program) || (binary.find('/') != std::string_view::npos &&
                                                  same_file(b.given, program)))
    return b;
  if (!names_library(binary))
    return make_error(Errc::invalid_argument,
                      fmt::format("binary '{}' is neither the traced program {} (its path or name, "
                                  "/proc/self/exe, or *) nor a shared library (a name with .so)",
                                  binary, program));
  b.library = true;
  if (binary.find('/') != std::string_view::npos) {
    if (!is_regular(b.given))
      return make_error(Errc::not_found, fmt::format("shared library '{}': no such file", binary));
    b.path = b.given;
    return b;
  }
  std::string tried;
  for (const std::string& d : search_dirs()) {
    std::string p = d + "/" + b.given;
    if (is_regular(p)) {
      b.path = std::move(p);
      return b;
    }
    tried += (tried.empty() ? "" : ", ") + d;
  }
  return make_error(Errc::not_found,
                    fmt::format("shared library '{}' not found in LD_LIBRARY_PATH or the library "
                                "directories ({}): give its path",
                                binary, tried));
}

bool is_library(const UprobeBinary& b, const std::string& loaded_path) {
  if (!b.library || loaded_path.empty()) return false;
  if (same_file(b.path, loaded_path)) return true;
  return b.given.find('/') == std::string::npos && base_name(loaded_path) == b.given;
}

}  // namespace utramp::ebpf
