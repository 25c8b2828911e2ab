// Aggregates work()'s return values: a hash map from return value to count, and the
// sum of all return values in a global variable.
//
//   utramp run fexit_ret.bpf.o -- ./bpf_target
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 64);
  __type(key, __s32);
  __type(value, __u64);
} rets SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} ret_sum SEC(".maps");

static __noinline int bump(__s32 key) {  // a BPF-to-BPF call
  __u64* c = bpf_map_lookup_elem(&rets, &key);
  if (c) {
    __sync_fetch_and_add(c, 1);
    return 0;
  }
  __u64 one = 1;
  if (bpf_map_update_elem(&rets, &key, &one, BPF_NOEXIST) != 0) {
    c = bpf_map_lookup_elem(&rets, &key);
    if (c) __sync_fetch_and_add(c, 1);
  }
  return 0;
}

SEC("fexit/work")
int BPF_PROG(work_ret, int n, int ret) {
  __u64 r = 0;
  bpf_get_func_ret(ctx, &r);  // the same value as `ret`, through the helper
  bump((__s32)r);
  __u32 zero = 0;
  __u64* s = bpf_map_lookup_elem(&ret_sum, &zero);
  if (s) __sync_fetch_and_add(s, (__u64)ret);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
