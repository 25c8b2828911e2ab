// Fault injection with bpf_override_return from a uprobe at a function's entry, as the
// kernel's kprobe fault injectors do it: try_alloc(i) returns -12 (-ENOMEM) without
// running for every i % 4 == 1, and the injections are counted. try_alloc is marked
// UTRAMP_ALLOW_ERROR_INJECTION; a function that is not may be skipped only under
// `utramp run --allow-override`.
//
//   utramp run override_return.bpf.o -- ./events_target alloc 1000
//
// Built with -D__TARGET_ARCH_x86 (bpf_tracing.h's PT_REGS_* need the architecture).
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#ifndef BPF_UPROBE
#define BPF_UPROBE(name, args...) BPF_KPROBE(name, ##args)
#endif

const volatile unsigned every = 4;  // .rodata

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} injected SEC(".maps");

SEC("uprobe/try_alloc")
int BPF_UPROBE(fail_alloc, int i) {
  if ((unsigned)i % every != 1) return 0;
  bpf_override_return(ctx, -12);
  __u32 zero = 0;
  __u64* c = bpf_map_lookup_elem(&injected, &zero);
  if (c) __sync_fetch_and_add(c, 1);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
