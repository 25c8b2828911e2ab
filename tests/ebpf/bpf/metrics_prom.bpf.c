// The maps of the --metrics end-to-end test (prom_e2e_test.cpp), libbpf-tools style:
// calls of step(n) counted by a struct key, a bpftrace-style log2 histogram of n, one
// histogram of n per key (libbpf-tools' struct hist), per-CPU counts and a global.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct key {
  __u32 mod;   // n % 3
  char kind[8];  // "even" or "odd"
};

struct hist {
  __u32 slots[16];
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16);
  __type(key, struct key);
  __type(value, __u64);
} calls SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 16);
  __type(key, __u32);
  __type(value, __u64);
} arg_hist SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16);
  __type(key, __u32);
  __type(value, struct hist);
} hists SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} steps_total SEC(".maps");

__u64 total = 0;

static __always_inline __u32 log2l(__u64 v) {
  __u32 r = 0;
  while (v > 1 && r < 15) {
    v >>= 1;
    r++;
  }
  return r;
}

SEC("fentry/step")
int BPF_PROG(on_step, int n) {
  struct key k = {};
  k.mod = (__u32)n % 3;
  if (n & 1) __builtin_memcpy(k.kind, "odd", 4);
  else __builtin_memcpy(k.kind, "even", 5);
  __u64* c = bpf_map_lookup_elem(&calls, &k);
  if (c) {
    __sync_fetch_and_add(c, 1);
  } else {
    __u64 one = 1;
    if (bpf_map_update_elem(&calls, &k, &one, BPF_NOEXIST) != 0) {
      c = bpf_map_lookup_elem(&calls, &k);
      if (c) __sync_fetch_and_add(c, 1);
    }
  }
  __u32 slot = log2l((__u64)n);
  __u64* h = bpf_map_lookup_elem(&arg_hist, &slot);
  if (h) __sync_fetch_and_add(h, 1);
  __u32 mod = k.mod;
  struct hist* hh = bpf_map_lookup_elem(&hists, &mod);
  if (!hh) {
    struct hist zero = {};
    bpf_map_update_elem(&hists, &mod, &zero, BPF_NOEXIST);
    hh = bpf_map_lookup_elem(&hists, &mod);
  }
  if (hh && slot < 16) __sync_fetch_and_add(&hh->slots[slot], 1);
  __u32 zero = 0;
  __u64* s = bpf_map_lookup_elem(&steps_total, &zero);
  if (s) __sync_fetch_and_add(s, 1);
  __sync_fetch_and_add(&total, 1);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
