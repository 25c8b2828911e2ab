// Good input: BPF_PROG's prototype matches work(int) and fexit's return value (int);
// the inner function is inlined, so the check reads the object's DWARF.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
SEC("fexit/work")
int BPF_PROG(typed, int n, int ret) { return n + ret; }
char LICENSE[] SEC("license") = "GPL";
