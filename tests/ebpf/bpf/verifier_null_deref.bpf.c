// Refused by the verifier: a map lookup's result used without the NULL check.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4);
  __type(key, __u32);
  __type(value, __u64);
} counts SEC(".maps");

SEC("fentry/work")
int count(void* ctx) {
  __u32 key = 0;
  __u64* v = bpf_map_lookup_elem(&counts, &key);
  return (int)*v;
}

char LICENSE[] SEC("license") = "GPL";
