// Bad input: the target program has no such function.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("fentry/no_such_function")
int prog(void* ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
