// User stacks under return probes: uretprobes on path_a2 and path_a1 of
// examples/bpf/stack_target.c replace their return addresses with the return
// trampoline while they run; the stack malloc's program takes must still name their
// real callers (probe::real_return_address). The uretprobes count path_a2's returns.
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
} stack_calls SEC(".maps");

__u64 returns = 0;

SEC("uprobe/libc.so.6:malloc")
int BPF_KPROBE(on_malloc) {
  long id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
  if (id < 0) return 0;
  __u32 key = id;
  __u64 one = 1, *c = bpf_map_lookup_elem(&stack_calls, &key);
  if (c) __sync_fetch_and_add(c, 1);
  else bpf_map_update_elem(&stack_calls, &key, &one, BPF_NOEXIST);
  return 0;
}

SEC("uretprobe/path_a2")
int BPF_KRETPROBE(a2_ret) {
  __sync_fetch_and_add(&returns, 1);
  return 0;
}

SEC("uretprobe/path_a1")
int BPF_KRETPROBE(a1_ret) { return 0; }

char LICENSE[] SEC("license") = "GPL";
