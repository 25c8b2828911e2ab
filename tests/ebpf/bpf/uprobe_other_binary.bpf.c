// Bad input: libbpf's BINARY:FUNC form naming a program other than the one traced.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("uprobe/not_the_target:work")
int other(void* ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
