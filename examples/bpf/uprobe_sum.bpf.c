// Uprobes written the libbpf-tools way, run unchanged: vmlinux.h types, registers read
// through CO-RE (BPF_KPROBE's PT_REGS_PARM*, BPF_CORE_READ, ctx->di), and sections that
// do not name the function, attached from the command line:
//
//   utramp run uprobe_sum.bpf.o --attach sum_add=uprobe:adder:uprobed_add \
//       --attach sum_add_ret=uretprobe:adder:uprobed_add -- ./adder 1000
//
// sum_sub uses the kprobe name libbpf-tools programs give user functions.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

// [0] uprobed_add calls, [1] the sum of its a, [2] the sum of what it returned,
// [3] uprobed_sub calls, [4] the sum of its b (BPF_CORE_READ), [5] the sum of its a
// (ctx->di), [6] the calls that saw orig_ax exist (bpf_core_field_exists).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 7);
	__type(key, u32);
	__type(value, u64);
} sums SEC(".maps");

static __always_inline void add(u32 key, u64 v)
{
	u64 *s = bpf_map_lookup_elem(&sums, &key);

	if (s)
		__sync_fetch_and_add(s, v);
}

SEC("uprobe")
int BPF_KPROBE(sum_add, int a, int b)
{
	add(0, 1);
	add(1, a);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(sum_add_ret, int ret)
{
	add(2, ret);
	return 0;
}

SEC("kprobe/uprobed_sub")
int sum_sub(struct pt_regs *ctx)
{
	int b = (int)BPF_CORE_READ(ctx, si);

	add(3, 1);
	add(4, b);
	add(5, (int)ctx->di);
	if (bpf_core_field_exists(ctx->orig_ax))
		add(6, 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
