// Good input: a typed prototype kept out of line (in BTF and DWARF) matching work(int).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
__attribute__((noinline)) int ____typed(unsigned long long* ctx, int n) { return n; }
SEC("fentry/work")
int typed(unsigned long long* ctx) { return ____typed(ctx, (int)ctx[0]); }
char LICENSE[] SEC("license") = "GPL";
