// Bad input: an offset inside an instruction. may_fail() starts with the five NOPs of
// -fpatchable-function-entry=5; +5 is its first real instruction (several bytes: a
// movslq), so +6 falls inside it.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("uprobe/may_fail+6")
int inside_insn(void* ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
