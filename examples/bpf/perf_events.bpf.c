// bpf_perf_event_output, the way tools written before the ring buffer send events: one
// record {pid_tgid, i, v} per emit(i, v) call, to the ring of the CPU the call runs on
// (BPF_F_CURRENT_CPU), and per burst(i, v) call to ring 0 (an explicit index).
// `utramp run` streams the records as they come, every thread's in the order it sent
// them, and says at the end how many were lost to a full ring.
//
//   utramp run perf_events.bpf.o -- ./events_target emit 4 1000
//   utramp run perf_events.bpf.o --perf-pages 1 -- ./events_target burst 1000
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct event {
  __u64 pid_tgid;
  __u64 i;
  __u64 v;
};

// As libbpf-tools declare them: no max_entries (one ring per possible CPU).
struct {
  __uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
  __uint(key_size, sizeof(__u32));
  __uint(value_size, sizeof(__u32));
} events SEC(".maps");

// Records the helper refused (an error other than a full ring would be a bug here).
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} refused SEC(".maps");

static __always_inline void send(void* ctx, __u64 index, int i, unsigned long v) {
  struct event e = {.pid_tgid = bpf_get_current_pid_tgid(), .i = i, .v = v};
  if (bpf_perf_event_output(ctx, &events, index, &e, sizeof e) != 0) {
    __u32 k = 0;
    __u64* n = bpf_map_lookup_elem(&refused, &k);
    if (n) __sync_fetch_and_add(n, 1);
  }
}

SEC("fentry/emit")
int BPF_PROG(on_emit, int i, unsigned long v) {
  send(ctx, BPF_F_CURRENT_CPU, i, v);
  return 0;
}

SEC("fentry/burst")
int BPF_PROG(on_burst, int i, unsigned long v) {
  send(ctx, 0, i, v);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
