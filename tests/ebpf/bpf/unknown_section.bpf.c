// Bad input: a program section of a type utramp does not run (a kernel tracepoint).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("tracepoint/syscalls/sys_enter_write")
int probe(void* ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
