// Outstanding allocations, the way bcc's libbpf-tools memleak tracks them: malloc's size
// kept per thread from entry to return, each returned address with its size in a hash
// map, removed again by free. Sections bare, attached from the command line as
// libbpf-tools' loader attaches them (bpf_program__attach_uprobe on libc):
//
//   utramp run memleak.bpf.o --attach malloc_enter=uprobe:libc.so.6:malloc \
//       --attach malloc_exit=uretprobe:libc.so.6:malloc --attach free_enter=uprobe:libc.so.6:free \
//       -- sort FILE
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, u64);
} sizes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, u64);
	__type(value, u64);
} allocs SEC(".maps");

// [0] allocations seen, [1] bytes allocated, [2] frees of a block seen allocated,
// [3] allocations the allocs map had no room for.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, u64);
} stats SEC(".maps");

static __always_inline void add(u32 key, u64 v)
{
	u64 *c = bpf_map_lookup_elem(&stats, &key);

	if (c)
		__sync_fetch_and_add(c, v);
}

SEC("uprobe")
int BPF_KPROBE(malloc_enter, u64 size)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	u64 sz = size;

	bpf_map_update_elem(&sizes, &tid, &sz, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(malloc_exit, void *ret)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	u64 addr = (u64)ret;
	u64 *sz = bpf_map_lookup_elem(&sizes, &tid);

	if (!sz)
		return 0;
	u64 size = *sz;
	bpf_map_delete_elem(&sizes, &tid);
	if (!addr)
		return 0;
	add(0, 1);
	add(1, size);
	if (bpf_map_update_elem(&allocs, &addr, &size, BPF_ANY))
		add(3, 1);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(free_enter, void *p)
{
	u64 addr = (u64)p;

	if (bpf_map_delete_elem(&allocs, &addr) == 0)
		add(2, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
