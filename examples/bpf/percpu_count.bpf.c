// Per-CPU call counters: how often work() runs (one per-CPU slot, summed when printed),
// and per-CPU counts by n % 4.
//
//   utramp run percpu_count.bpf.o -- ./bpf_target
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} calls SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, 16);
  __type(key, __u32);
  __type(value, __u64);
} by_mod4 SEC(".maps");

SEC("fentry/work")
int BPF_PROG(count_work, int n) {
  __u32 zero = 0, k = (__u32)n % 4;
  __u64* c = bpf_map_lookup_elem(&calls, &zero);
  // This CPU's slot. The kernel runs a program with preemption off, so a plain add
  // is enough there; in user space two threads can take turns on one CPU between the
  // load and the store (or migrate after the lookup), so the add is atomic.
  if (c) __sync_fetch_and_add(c, 1);
  __u64* m = bpf_map_lookup_elem(&by_mod4, &k);
  if (m) {
    __sync_fetch_and_add(m, 1);  // a thread may migrate between lookup and add
  } else {
    __u64 one = 1;
    if (bpf_map_update_elem(&by_mod4, &k, &one, BPF_NOEXIST) != 0) {
      m = bpf_map_lookup_elem(&by_mod4, &k);
      if (m) __sync_fetch_and_add(m, 1);
    }
  }
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
