// Uprobes at the entry of vector_target's functions, whose xmm/ymm arguments are live
// there. Built twice: -DHELPERS adds a hash map update per hit (proven general-purpose-
// only, as the programs without it are) and a bpf_ktime_get_ns (the C library's
// clock_gettime calls the vDSO through a pointer: not proven, so the handler saves the
// extended state); without it the programs call no helper (nothing is saved). Either
// way the target's arguments must arrive intact.
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

__u64 hits = 0;

#ifdef HELPERS
__u64 last_ns = 0;

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16);
  __type(key, __u64);
  __type(value, __u64);
} by_ip SEC(".maps");

static __always_inline void note(struct pt_regs *ctx)
{
  __u64 ip = PT_REGS_IP(ctx), one = 1, *c = bpf_map_lookup_elem(&by_ip, &ip);
  last_ns = bpf_ktime_get_ns();
  if (c) __sync_fetch_and_add(c, 1);
  else bpf_map_update_elem(&by_ip, &ip, &one, BPF_NOEXIST);
}
#else
static __always_inline void note(struct pt_regs *ctx) {}
#endif

SEC("uprobe/weigh8")
int BPF_KPROBE(on_weigh8) { __sync_fetch_and_add(&hits, 1); note(ctx); return 0; }

SEC("uprobe/weigh_f")
int BPF_KPROBE(on_weigh_f) { __sync_fetch_and_add(&hits, 1); note(ctx); return 0; }

SEC("uprobe/add4")
int BPF_KPROBE(on_add4) { __sync_fetch_and_add(&hits, 1); note(ctx); return 0; }

char LICENSE[] SEC("license") = "GPL";
