// Two clients side by side (clients_test.cpp) on builds whose entries run -p cannot
// change while threads run (gcc's five 1-byte NOPs): the calls of attach_counter's
// count_a and count_b counted by uprobes past their 5-byte compiler sites, which need
// no site of their own, in the same map as count_calls.bpf.c.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, __u64);
} calls_total SEC(".maps");

static void count(__u32 k) {
  __u64* c = bpf_map_lookup_elem(&calls_total, &k);
  if (c) __sync_fetch_and_add(c, 1);
}

SEC("uprobe//proc/self/exe:count_a+5")
int on_count_a(void* ctx) {
  count(0);
  return 0;
}

SEC("uprobe//proc/self/exe:count_b+5")
int on_count_b(void* ctx) {
  count(1);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
