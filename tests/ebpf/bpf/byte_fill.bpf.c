// fentry on bpf_target's work(n): FNV-1a over 256 stack bytes filled from n, as
// bench_ebpf_engines' fnv. clang -O2 compiles the fill to a loop the JIT runs 16 bytes
// at a time in SSE2 lanes (src/arch/x86_64/bpf_jit.cpp, "Byte fills"); run_e2e_test
// checks the hashes against the same computation in C.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

__u64 calls = 0;
__u64 hash_xor = 0;   // the xor of every call's hash
__u64 hash_sum = 0;   // and their sum

SEC("fentry/work")
int BPF_PROG(fill_hash, int n) {
  __u8 buf[256];
  const __u64 seed = (__u64)n * 0x9e3779b97f4a7c15ull + 1;
  for (__u64 i = 0; i < 256; i++) buf[i] = (__u8)(((i + 1) * seed) >> 8);
  __u64 h = 0xcbf29ce484222325ull;
  for (__u64 i = 0; i < 256; i++) {
    h ^= buf[i];
    h *= 0x100000001b3ull;
  }
  calls += 1;
  hash_xor ^= h;
  hash_sum += h;
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
