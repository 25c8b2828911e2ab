// The reference for ustack_fentry.bpf.c: a uprobe at alloc_leaf's first instruction
// counts calls by user stack id the same way.
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct {
  __uint(type, BPF_MAP_TYPE_STACK_TRACE);
  __uint(key_size, sizeof(__u32));
  __uint(value_size, 32 * sizeof(__u64));
  // A stack's id is its hash's bucket, as in the kernel: a stack whose bucket holds
  // another gets -EEXIST and is not counted. With ASLR the buckets change every run:
  // a stack meets one of a run's three others in 3 of 1,024 runs at 1,024 buckets (CI
  // lost every path_a call that way once), in 3 of 16,384 here.
  __uint(max_entries, 16384);
} stacks SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 1024);
  __type(key, __u32);
  __type(value, __u64);
} uprobe_stack_calls SEC(".maps");

__u64 errors = 0;

SEC("uprobe/alloc_leaf")
int BPF_KPROBE(leaf_uprobe)
{
  long id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
  if (id < 0) {
    __sync_fetch_and_add(&errors, 1);
    return 0;
  }
  __u32 key = id;
  __u64 one = 1, *c = bpf_map_lookup_elem(&uprobe_stack_calls, &key);
  if (c) __sync_fetch_and_add(c, 1);
  else bpf_map_update_elem(&uprobe_stack_calls, &key, &one, BPF_NOEXIST);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
