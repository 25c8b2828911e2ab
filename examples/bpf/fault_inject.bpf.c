// An fmod_ret fault injector: may_fail(x) returns -22 (EINVAL) without running when
// x % 3 == 0; the injections are counted.
//
//   utramp run fault_inject.bpf.o -- ./bpf_target
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

const volatile unsigned every = 3;  // .rodata (unsigned: clang 14 has no BPF signed division)

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} injected SEC(".maps");

SEC("fmod_ret/may_fail")
int BPF_PROG(inject, int x, int ret) {
  if ((unsigned)x % every != 0) return 0;  // 0: run the function
  __u32 zero = 0;
  __u64* c = bpf_map_lookup_elem(&injected, &zero);
  if (c) __sync_fetch_and_add(c, 1);
  return -22;
}

char LICENSE[] SEC("license") = "GPL";
