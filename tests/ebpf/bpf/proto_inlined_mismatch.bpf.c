// Bad input: BPF_PROG declares two 8-byte arguments for work(int). clang inlines
// ____typed into typed (no BTF for it): only the object's DWARF has the prototype.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
SEC("fentry/work")
int BPF_PROG(typed, long a, long b) { return (int)(a + b); }
char LICENSE[] SEC("license") = "GPL";
