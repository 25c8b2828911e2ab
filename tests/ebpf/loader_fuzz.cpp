// libFuzzer target over the loader: any bytes are parsed and checked as an eBPF object;
// the loader must return an error or an object, never crash, hang or leak.
//   clang build: ninja fuzz_ebpf_loader && ./fuzz_ebpf_loader -max_total_time=600 CORPUS
// Seed the corpus with examples/bpf's objects.
#include <cstddef>
#include <cstdint>

#include "ebpf/helpers.hpp"
#include "ebpf/loader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = utramp::ebpf::parse_object({data, size}, "fuzz", utramp::ebpf::runtime_helpers());
  (void)r;
  return 0;
}
