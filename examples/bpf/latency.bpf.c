// Function latency histogram: fentry stores the start time by thread, fexit adds
// log2(duration in ns) to a histogram (bpftrace's hist()).
//
//   utramp run latency.bpf.o -- ./bpf_target
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 1024);
  __type(key, __u32);
  __type(value, __u64);
} start SEC(".maps");

// Slot i counts durations in [2^i, 2^(i+1)) ns; slot 0 also counts 0.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 64);
  __type(key, __u32);
  __type(value, __u64);
} hist_ns SEC(".maps");

__u64 calls = 0;

static __always_inline __u32 log2l(__u64 v) {
  __u32 r = 0;
  while (v > 1 && r < 63) {
    v >>= 1;
    r++;
  }
  return r;
}

SEC("fentry/work")
int BPF_PROG(work_entry, int n) {
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  __u64 t = bpf_ktime_get_ns();
  bpf_map_update_elem(&start, &tid, &t, BPF_ANY);
  return 0;
}

SEC("fexit/work")
int BPF_PROG(work_exit, int n, int ret) {
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  __u64* t0 = bpf_map_lookup_elem(&start, &tid);
  if (!t0) return 0;
  __u64 d = bpf_ktime_get_ns() - *t0;
  bpf_map_delete_elem(&start, &tid);
  __u32 slot = log2l(d);
  __u64* c = bpf_map_lookup_elem(&hist_ns, &slot);
  if (c) __sync_fetch_and_add(c, 1);
  __sync_fetch_and_add(&calls, 1);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
