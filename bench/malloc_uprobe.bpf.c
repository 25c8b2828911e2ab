// The two programs scripts/bench-malloc-uprobe.sh times on libc's malloc: one that does
// nothing, one that does one map update (a per-thread call count in a hash map, as
// bpftrace's `@[tid] = count()` does). Built apart (-DEMPTY or not): one object each.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#ifdef EMPTY
SEC("uprobe/libc.so.6:malloc")
int malloc_empty(struct pt_regs *ctx)
{
	return 0;
}
#else
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, u32);
	__type(value, u64);
} calls SEC(".maps");

SEC("uprobe/libc.so.6:malloc")
int malloc_update(struct pt_regs *ctx)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	u64 one = 1, *c = bpf_map_lookup_elem(&calls, &tid);

	if (c)
		__sync_fetch_and_add(c, 1);
	else
		bpf_map_update_elem(&calls, &tid, &one, BPF_NOEXIST);
	return 0;
}
#endif

char LICENSE[] SEC("license") = "GPL";
