// The eBPF programs of bench_ebpf_cost (compiled by clang -O2 -g -target bpf). Their
// sections name a placeholder target: the benchmark attaches each program to its own
// copy of the traced function itself.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16);
  __type(key, __u32);
  __type(value, __u64);
} counts SEC(".maps");

// (c) does nothing: what an eBPF program costs over a native one is its entry and exit.
SEC("fentry/target")
int empty(void* ctx) { return 0; }

// (d) a hash-map increment per call, as `@calls[key] = count()` would do.
SEC("fentry/target")
int count(void* ctx) {
  __u32 key = 0;
  __u64* v = bpf_map_lookup_elem(&counts, &key);
  if (v) {
    __sync_fetch_and_add(v, 1);
  } else {
    __u64 one = 1;
    bpf_map_update_elem(&counts, &key, &one, BPF_NOEXIST);
  }
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
