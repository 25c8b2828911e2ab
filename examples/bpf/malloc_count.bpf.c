// A uprobe and a uretprobe on the C library's malloc, as libbpf programs name them
// (`uprobe/libc.so.6:malloc`), and one on the traced program's own wrapper named through
// /proc/self/exe as libbpf-bootstrap does. They count every call, and the calls of one
// distinctive size, at entry and at return (the size kept per thread from entry to
// return, as bcc's memleak does), so that the counts can be checked exactly against the
// target's own: malloc_target asks for kTracedSize bytes a known number of times.
//
//   utramp run malloc_count.bpf.o -- ./malloc_target 4 10000
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define TRACED_SIZE 4093  // malloc_target.c: kTracedSize

// [0] malloc calls, [1] of TRACED_SIZE bytes, [2] their bytes, [3] returns of such a call
// with a non-null pointer, [4] counted_malloc calls (the target's wrapper).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 5);
	__type(key, u32);
	__type(value, u64);
} counts SEC(".maps");

// The size each thread asked for, from malloc's entry to its return.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, u32);
	__type(value, u64);
} sizes SEC(".maps");

static __always_inline void add(u32 key, u64 v)
{
	u64 *c = bpf_map_lookup_elem(&counts, &key);

	if (c)
		__sync_fetch_and_add(c, v);
}

SEC("uprobe/libc.so.6:malloc")
int BPF_KPROBE(malloc_enter, u64 size)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	u64 sz = size;

	add(0, 1);
	if (size == TRACED_SIZE) {
		add(1, 1);
		add(2, size);
		bpf_map_update_elem(&sizes, &tid, &sz, BPF_ANY);
	}
	return 0;
}

SEC("uretprobe/libc.so.6:malloc")
int BPF_KRETPROBE(malloc_exit, void *ret)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	u64 *sz = bpf_map_lookup_elem(&sizes, &tid);

	if (!sz)
		return 0;
	if (ret)
		add(3, 1);
	bpf_map_delete_elem(&sizes, &tid);
	return 0;
}

SEC("uprobe//proc/self/exe:counted_malloc")
int BPF_KPROBE(wrapper_enter, u64 size)
{
	add(4, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
