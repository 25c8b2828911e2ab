// A uprobe on a function of a library the target loads later with dlopen, named by its
// file name as libbpf sections name libraries; attached when the library is loaded,
// detached when it is unloaded, attached again when it is loaded again.
//
//   utramp run plugin_count.bpf.o -- ./malloc_target 1 1 ./libmalloc_plugin.so 100
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

// [0] plugin_work calls, [1] the sum of its argument, [2] the sum of what it returned.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, u32);
	__type(value, u64);
} plugin SEC(".maps");

static __always_inline void add(u32 key, u64 v)
{
	u64 *c = bpf_map_lookup_elem(&plugin, &key);

	if (c)
		__sync_fetch_and_add(c, v);
}

SEC("uprobe/libmalloc_plugin.so:plugin_work")
int BPF_KPROBE(work_enter, long n)
{
	add(0, 1);
	add(1, n);
	return 0;
}

SEC("uretprobe/libmalloc_plugin.so:plugin_work")
int BPF_KRETPROBE(work_exit, long ret)
{
	add(2, ret);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
