// `utramp run -p` (run_pid_test.cpp): the calls of attach_counter's count_a (an fentry
// program) and count_b (a uprobe past its 5-byte compiler site: the site itself is
// made utramp's canonical NOP for the trampolines, and a probe wants the file's bytes),
// counted libbpf-style in an array map.
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

SEC("fentry/count_a")
int BPF_PROG(on_count_a, long x) {
  count(0);
  return 0;
}

SEC("uprobe//proc/self/exe:count_b+5")
int on_count_b(void* ctx) {
  count(1);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
