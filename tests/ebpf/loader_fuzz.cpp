// libFuzzer target over the loader: any bytes are parsed and checked as an eBPF object
// (ELF, sections, relocations, BTF maps and globals, every program's instructions); the
// loader must return an error or an object, never crash, hang or leak.
//   scripts/fuzz.sh [SECONDS]    builds it (clang, -DUTRAMP_FUZZ=ON, build-fuzz/) and
//                                runs it seeded with examples/bpf's and bpf/'s objects
// CI runs it for 60 s (scripts/test.sh).
#include <cstddef>
#include <cstdint>

#include "ebpf/helpers.hpp"
#include "ebpf/loader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = utramp::ebpf::parse_object({data, size}, "fuzz", utramp::ebpf::runtime_helpers());
  (void)r;
  return 0;
}
