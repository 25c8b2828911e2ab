// Bad input: a uretprobe on a function the target does not have.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("uretprobe/no_such_function")
int unknown(void* ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
