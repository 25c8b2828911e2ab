// Bad input: a helper utramp does not provide (bpf_get_current_task, 35).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("fentry/work")
int prog(void* ctx) { return bpf_get_current_task() != 0; }
char LICENSE[] SEC("license") = "GPL";
