// Bad input: a map type utramp does not provide (cgroup arrays: there are no cgroups to
// hold here).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct {
  __uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
  __uint(max_entries, 16);
  __uint(key_size, 4);
  __uint(value_size, 4);
} cgroups SEC(".maps");
SEC("fentry/work")
int prog(void* ctx) {
  __u32 k = 0;
  return bpf_map_lookup_elem(&cgroups, &k) != 0;
}
char LICENSE[] SEC("license") = "GPL";
