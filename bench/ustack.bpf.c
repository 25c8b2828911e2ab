// scripts/bench-ustack.sh's programs on ustack_target's leaf(): with -DEMPTY an empty
// uprobe program (the baseline), else one bpf_get_stackid of the 10-frame user stack.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(key_size, sizeof(u32));
	__uint(value_size, 127 * sizeof(u64));
	__uint(max_entries, 1024);
} stacks SEC(".maps");

u64 errors = 0;

#ifdef FENTRY
SEC("fentry/leaf")
int BPF_PROG(on_leaf, long n)
#else
SEC("uprobe/leaf")
int BPF_KPROBE(on_leaf)
#endif
{
#ifndef EMPTY
	if (bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK) < 0)
		__sync_fetch_and_add(&errors, 1);
#endif
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
