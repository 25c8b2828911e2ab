// Bad input: a program section of a type utramp does not run.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("kprobe/work")
int probe(void* ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
