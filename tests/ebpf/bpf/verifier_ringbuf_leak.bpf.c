// Refused by the verifier: a ring buffer record reserved and, when n is odd, neither
// submitted nor discarded.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 4096);
} events SEC(".maps");

SEC("fentry/work")
int BPF_PROG(leak, int n) {
  __u64* e = bpf_ringbuf_reserve(&events, 8, 0);
  if (!e) return 0;
  *e = n;
  if (n % 2 == 0) bpf_ringbuf_submit(e, 0);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
