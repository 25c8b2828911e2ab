// Calls of malloc counted by process, thread name and stack, keyed the way bcc's
// libbpf-tools key their stack maps (profile, offcputime): a struct holding the ids
// bpf_get_stackid gave for the user and the kernel stack. `utramp run` prints each key
// with its stack id members (a name with "stack" in it, ending in "id") replaced by
// the stacks they name, as bpftrace prints `@[pid, ustack] = count()`:
//
//   utramp run stackcount.bpf.o -- ./stack_target 100
//
// There is no kernel stack in user space: kern_stack_id is -EFAULT (-14) in every key,
// as the kernel gives for a stack it cannot take, and is printed as that number.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define TASK_COMM_LEN 16
#define PERF_MAX_STACK_DEPTH 127

struct key_t {
	u32 pid;
	s32 user_stack_id;
	s32 kern_stack_id;
	char name[TASK_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(key_size, sizeof(u32));
	__uint(value_size, PERF_MAX_STACK_DEPTH * sizeof(u64));
	__uint(max_entries, 4096);
} stackmap SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct key_t);
	__type(value, u64);
} counts SEC(".maps");

SEC("uprobe/libc.so.6:malloc")
int BPF_KPROBE(malloc_enter)
{
	struct key_t key = {};
	u64 zero = 0, *c;

	key.pid = bpf_get_current_pid_tgid() >> 32;
	key.user_stack_id = bpf_get_stackid(ctx, &stackmap, BPF_F_USER_STACK);
	key.kern_stack_id = bpf_get_stackid(ctx, &stackmap, 0);
	bpf_get_current_comm(&key.name, sizeof(key.name));
	c = bpf_map_lookup_elem(&counts, &key);
	if (!c) {
		bpf_map_update_elem(&counts, &key, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&counts, &key);
	}
	if (c)
		__sync_fetch_and_add(c, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
