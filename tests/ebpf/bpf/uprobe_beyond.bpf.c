// Bad input: an offset past the end of the function.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("uprobe/may_fail+0x10000")
int beyond(void* ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
