// Bad input: a typed prototype (in BTF: the callee is not inlined) of two 8-byte
// arguments for work(int), which takes one of 4 bytes.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
__attribute__((noinline)) int ____typed(unsigned long long* ctx, long a, long b) {
  return (int)(a + b);
}
SEC("fentry/work")
int typed(unsigned long long* ctx) { return ____typed(ctx, (long)ctx[0], (long)ctx[1]); }
char LICENSE[] SEC("license") = "GPL";
