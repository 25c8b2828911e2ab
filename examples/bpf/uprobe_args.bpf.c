// Uprobes and uretprobes on bpf_target: arguments and return values read from the
// registers (struct pt_regs) through BPF_UPROBE / BPF_URETPROBE, a probe inside a
// function (FUNC+OFFSET) and libbpf's BINARY:FUNC form.
//
//   utramp run uprobe_args.bpf.o -- ./bpf_target
//
// Built with -D__TARGET_ARCH_x86 (bpf_tracing.h's PT_REGS_* need the architecture).
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

// libbpf 1.2 names them; they are BPF_KPROBE and BPF_KRETPROBE (Debian 12 has 1.1).
#ifndef BPF_UPROBE
#define BPF_UPROBE(name, args...) BPF_KPROBE(name, ##args)
#define BPF_URETPROBE(name, args...) BPF_KRETPROBE(name, ##args)
#endif

// work(n)'s argument modulo 4, counted at its entry.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 4);
  __type(key, __u32);
  __type(value, __u64);
} args_mod4 SEC(".maps");

// work()'s return values (n % 5), counted at each return.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 8);
  __type(key, __u32);
  __type(value, __u64);
} rets SEC(".maps");

// [0]: work+5 hits with an even n; [1]: may_fail() calls with an odd argument.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, __u64);
} inside SEC(".maps");

static __always_inline void bump(void* map, __u32 key) {
  __u64* c = bpf_map_lookup_elem(map, &key);
  if (c) __sync_fetch_and_add(c, 1);
}

SEC("uprobe/work")
int BPF_UPROBE(work_args, int n) {
  bump(&args_mod4, (__u32)n % 4);
  return 0;
}

SEC("uretprobe/work")
int BPF_URETPROBE(work_ret, int ret) {
  if (ret >= 0 && ret < 8) bump(&rets, (__u32)ret);
  return 0;
}

// bpf_target is built with -fpatchable-function-entry=5: +5 is the first instruction
// after the entry's NOPs, where the argument is still in rdi.
SEC("uprobe/bpf_target:work+5")
int BPF_UPROBE(work_body, int n) {
  if (n % 2 == 0) bump(&inside, 0);
  return 0;
}

SEC("uprobe/*:may_fail")
int BPF_UPROBE(may_fail_odd, int x) {
  if (x % 2) bump(&inside, 1);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
