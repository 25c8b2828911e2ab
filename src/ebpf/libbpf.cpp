#include "ebpf/libbpf.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace utramp::ebpf {

namespace {

// The soname of the ABI the versions above belong to (Debian's libbpf1).
constexpr const char* kLibbpf = "libbpf.so.1";

struct Loaded {
  Libbpf fns;
  std::string error;  // empty: loaded
};

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded out;
    // Never unloaded: BTFs it made may live until exit.
    void* h = dlopen(kLibbpf, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
      const char* why = dlerror();
      out.error = fmt::format("cannot load {} (eBPF objects are read with libbpf): {}", kLibbpf,
                              why ? why : "unknown error");
      return out;
    }
#define UTRAMP_LIBBPF_BIND(fn, version)                                                               \
  if (out.error.empty()) {                                                                            \
    out.fns.fn = reinterpret_cast<decltype(&::fn)>(dlvsym(h, #fn, version));                          \
    if (!out.fns.fn) out.error = fmt::format("{} has no {}@{}: a libbpf too old", kLibbpf, #fn, version); \
  }
    UTRAMP_LIBBPF_FUNCTIONS(UTRAMP_LIBBPF_BIND)
#undef UTRAMP_LIBBPF_BIND
    return out;
  }();
  return l;
}

}  // namespace

Result<const Libbpf*> load_libbpf() {
  const Loaded& l = loaded();
  if (!l.error.empty()) return make_error(Errc::unsupported, l.error);
  return &l.fns;
}

const Libbpf& libbpf() {
  const Loaded& l = loaded();
  if (!l.error.empty()) {
    std::fprintf(stderr, "utramp: %s\n", l.error.c_str());
    std::abort();
  }
  return l.fns;
}

}  // namespace utramp::ebpf
