// Bad input: tail calls between fentry programs, whose context (the traced function's
// arguments) differs per function: refused at load, naming the program.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
int handler(void* ctx);
struct {
  __uint(type, BPF_MAP_TYPE_PROG_ARRAY);
  __uint(max_entries, 2);
  __uint(key_size, sizeof(__u32));
  __array(values, int(void*));
} jt SEC(".maps") = {.values = {[1] = (void*)&handler}};
SEC("fentry/other")
int handler(void* ctx) { return 0; }
SEC("fentry/work")
int prog(void* ctx) {
  bpf_tail_call(ctx, &jt, 1);
  return 0;
}
char LICENSE[] SEC("license") = "GPL";
