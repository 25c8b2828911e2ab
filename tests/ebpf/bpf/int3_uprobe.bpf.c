// A uprobe that stays an int3: trap_target (sigtrap_blocker.c) makes a system call within
// its first five bytes, which a jump-optimised detour cannot run. Counts the hits.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} hits SEC(".maps");

SEC("uprobe/trap_target")
int count_hit(void* ctx) {
  __u32 k = 0;
  __u64* c = bpf_map_lookup_elem(&hits, &k);
  if (c) __sync_fetch_and_add(c, 1);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
