// Refused by the verifier: work(int) has one argument, so the tracing context is one
// word (fentry): the program reads a second one.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("fentry/work")
int two(unsigned long long* ctx) { return (int)(ctx[0] + ctx[1]); }

char LICENSE[] SEC("license") = "GPL";
