// A program in the shape of libbpf-bootstrap's uprobe example, unchanged: bare
// SEC("uprobe")/SEC("uretprobe") sections its loader attaches to a function of its own
// binary, and /proc/self/exe sections that name the function:
//
//   utramp run uprobe_add.bpf.o --attach uprobe_add=uprobe:/proc/self/exe:uprobed_add \
//       --attach uretprobe_add=uretprobe:/proc/self/exe:uprobed_add -- ./adder 3
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

SEC("uprobe")
int BPF_KPROBE(uprobe_add, int a, int b)
{
	bpf_printk("uprobed_add ENTRY: a = %d, b = %d", a, b);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(uretprobe_add, int ret)
{
	bpf_printk("uprobed_add EXIT: return = %d", ret);
	return 0;
}

SEC("uprobe//proc/self/exe:uprobed_sub")
int BPF_KPROBE(uprobe_sub, int a, int b)
{
	bpf_printk("uprobed_sub ENTRY: a = %d, b = %d", a, b);
	return 0;
}

SEC("uretprobe//proc/self/exe:uprobed_sub")
int BPF_KRETPROBE(uretprobe_sub, int ret)
{
	bpf_printk("uprobed_sub EXIT: return = %d", ret);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
