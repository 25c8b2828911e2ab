// USDT probes read with libbpf's usdt.bpf.h, in the shape of libbpf-bootstrap's usdt
// example: a section that names the binary, provider and probe, and a bare SEC("usdt")
// its loader attaches with bpf_program__attach_usdt (here: --attach):
//
//   utramp run usdt_args.bpf.o --attach on_consts=usdt:usdt_target:demo:consts \
//       -- ./usdt_target 3
//
// on_args prints every argument as the 64-bit value bpf_usdt_arg gives (sign- or
// zero-extended from its size in the note); on_consts and on_guarded read theirs
// through BPF_USDT's typed parameters. demo:guarded runs only while its semaphore is
// raised: attaching on_guarded raises it.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

SEC("usdt//proc/self/exe:demo:args")
int on_args(struct pt_regs *ctx)
{
	int n = bpf_usdt_arg_cnt(ctx);
	long v;

	for (int i = 0; i < BPF_USDT_MAX_ARG_CNT && i < n; i++) {
		if (bpf_usdt_arg(ctx, i, &v))
			return 0;
		bpf_printk("bpf: demo:args arg%d = %ld", i, v);
	}
	return 0;
}

SEC("usdt")
int BPF_USDT(on_consts, int five, int minus_seven, long long big)
{
	bpf_printk("bpf: demo:consts %d %d %lld", five, minus_seven, big);
	return 0;
}

long guarded_sum;

SEC("usdt/usdt_target:demo:guarded")
int BPF_USDT(on_guarded, int i, long s)
{
	__sync_fetch_and_add(&guarded_sum, s);
	bpf_printk("bpf: demo:guarded %d %ld", i, s);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
