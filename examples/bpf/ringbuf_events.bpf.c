// A ring buffer event stream: one record {pid_tgid, n, ret} per work() return with
// n < 3, and a bpf_printk line for n == 0.
//
//   utramp run ringbuf_events.bpf.o -- ./bpf_target 1 10
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct event {
  __u64 pid_tgid;
  __u64 n;
  __u64 ret;
};

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 16);
} events SEC(".maps");

SEC("fexit/work")
int BPF_PROG(work_event, int n, int ret) {
  if (n >= 3) return 0;
  if (n == 0) bpf_printk("work(%d) returned %d", n, ret);
  struct event* e = bpf_ringbuf_reserve(&events, sizeof *e, 0);
  if (!e) return 0;
  e->pid_tgid = bpf_get_current_pid_tgid();
  e->n = n;
  e->ret = ret;
  bpf_ringbuf_submit(e, 0);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
