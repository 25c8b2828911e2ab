// Bad input: bpf_override_return from a uretprobe (the function already ran).
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

SEC("uretprobe/may_fail")
int BPF_KRETPROBE(too_late, int ret) {
  bpf_override_return(ctx, -1);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
