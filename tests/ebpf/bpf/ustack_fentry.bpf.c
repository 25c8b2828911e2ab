// User stacks from fentry and fexit programs: both on alloc_leaf of
// examples/bpf/stack_target.c take the stack with bpf_get_stackid into one stack trace
// map and count calls by stack id, as a uprobe at alloc_leaf does (ustack_uprobe.bpf.c):
// the stacks must be the same frames, the function first, then its callers. bpf_get_stack
// checks the first frame is the function (bpf_get_func_ip) and the skip.
#include <linux/bpf.h>
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
} fentry_stack_calls SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 1024);
  __type(key, __u32);
  __type(value, __u64);
} fexit_stack_calls SEC(".maps");

__u64 errors = 0;
long last_error = 0;
__u64 first_is_func = 0;  /* bpf_get_stack's first frame was bpf_get_func_ip */
__u64 skip1_ok = 0;       /* with one frame skipped, the frames shifted by one */

static __always_inline void count(void *map, void *ctx)
{
  long id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
  if (id < 0) {
    __sync_fetch_and_add(&errors, 1);
    last_error = id;
    return;
  }
  __u32 key = id;
  __u64 one = 1, *c = bpf_map_lookup_elem(map, &key);
  if (c) __sync_fetch_and_add(c, 1);
  else bpf_map_update_elem(map, &key, &one, BPF_NOEXIST);
}

SEC("fentry/alloc_leaf")
int BPF_PROG(leaf_entry, __u64 n)
{
  __u64 buf[8] = {}, skipped[8] = {};

  count(&fentry_stack_calls, ctx);
  bpf_get_stack(ctx, buf, sizeof(buf), BPF_F_USER_STACK);
  if (buf[0] == bpf_get_func_ip(ctx))
    __sync_fetch_and_add(&first_is_func, 1);
  bpf_get_stack(ctx, skipped, sizeof(skipped), BPF_F_USER_STACK | 1);
  if (skipped[0] == buf[1] && skipped[1] == buf[2] && skipped[0] != 0)
    __sync_fetch_and_add(&skip1_ok, 1);
  return 0;
}

SEC("fexit/alloc_leaf")
int BPF_PROG(leaf_exit, __u64 n, void *ret)
{
  count(&fexit_stack_calls, ctx);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
