// Bytes and calls of malloc by user stack, the way libbpf-tools' profilers key a hash
// by stack id: a uprobe on the C library's malloc takes the calling thread's user stack
// with bpf_get_stackid into a stack trace map and adds the size to the stack's row.
// `utramp run` prints each row with its stack symbolised, as bpftrace prints
// `@[ustack] = sum(size)`.
//
//   utramp run mallocstacks.bpf.o -- ./stack_target 100
//
// A second program, on the target's alloc_leaf, checks bpf_get_stack's contract: the
// first frame is the probed address, a kernel stack (no BPF_F_USER_STACK) is -EFAULT,
// a build-id stack -EOPNOTSUPP.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define PERF_MAX_STACK_DEPTH 127

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(key_size, sizeof(u32));
	__uint(value_size, PERF_MAX_STACK_DEPTH * sizeof(u64));
	__uint(max_entries, 4096);
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, u64);
} stack_bytes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, u64);
} stack_calls SEC(".maps");

u64 stackid_errors = 0;
long last_stackid_error = 0;

static __always_inline void add(void *map, u32 key, u64 v)
{
	u64 *c = bpf_map_lookup_elem(map, &key);

	if (!c) {
		u64 zero = 0;

		bpf_map_update_elem(map, &key, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(map, &key);
	}
	if (c)
		__sync_fetch_and_add(c, v);
}

SEC("uprobe/libc.so.6:malloc")
int BPF_KPROBE(malloc_enter, u64 size)
{
	long id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);

	if (id < 0) {
		__sync_fetch_and_add(&stackid_errors, 1);
		last_stackid_error = id;
		return 0;
	}
	add(&stack_bytes, (u32)id, size);
	add(&stack_calls, (u32)id, 1);
	return 0;
}

#define LEAF_FRAMES 16

u64 leaf_calls = 0;
u64 leaf_first_is_ip = 0;   /* buf[0] was the probed address */
long leaf_bytes = 0;        /* bpf_get_stack's result, last call */
long leaf_skip1_bytes = 0;  /* with one frame skipped */
u64 leaf_skip1_ok = 0;      /* and the frames shifted by one */
long kernel_stack_err = 0;  /* no BPF_F_USER_STACK: there is no kernel stack */
long build_id_err = 0;      /* BPF_F_USER_BUILD_ID: not provided */

SEC("uprobe/alloc_leaf")
int BPF_KPROBE(leaf_enter)
{
	u64 buf[LEAF_FRAMES] = {}, skipped[LEAF_FRAMES] = {};

	__sync_fetch_and_add(&leaf_calls, 1);
	leaf_bytes = bpf_get_stack(ctx, buf, sizeof(buf), BPF_F_USER_STACK);
	if (buf[0] == PT_REGS_IP(ctx))
		__sync_fetch_and_add(&leaf_first_is_ip, 1);
	leaf_skip1_bytes = bpf_get_stack(ctx, skipped, sizeof(skipped), BPF_F_USER_STACK | 1);
	if (skipped[0] == buf[1] && skipped[1] == buf[2] && skipped[0] != 0)
		__sync_fetch_and_add(&leaf_skip1_ok, 1);
	kernel_stack_err = bpf_get_stack(ctx, buf, sizeof(buf), 0);
	build_id_err = bpf_get_stack(ctx, buf, sizeof(buf), BPF_F_USER_STACK | BPF_F_USER_BUILD_ID);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
