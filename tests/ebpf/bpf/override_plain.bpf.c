// bpf_override_return on events_target's try_plain, which is not marked
// UTRAMP_ALLOW_ERROR_INJECTION: refused (the target is not started) unless `utramp run
// --allow-override`; then every odd call returns -5 without running.
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

SEC("uprobe/try_plain")
int BPF_KPROBE(fail_plain, int i) {
  if (i & 1) bpf_override_return(ctx, -5);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
