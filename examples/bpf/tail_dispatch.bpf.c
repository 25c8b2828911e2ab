// Tail calls, the libbpf way: a dispatcher on events_target's emit(i, v) jumps through a
// prog_array to a handler per case (i % 4), as protocol parsers and syscall
// dispatchers written for libbpf do. The handlers are bare SEC("uprobe") programs
// named only by the map's initialiser: they are loaded and put in their slots, never
// attached. Slot 3 is left empty: its calls fall through to the dispatcher's next line.
// Slot 2's handler tail-calls itself: with the dispatcher's, an invocation takes 33 tail
// calls, the most it may (the kernel's limit), so the handler runs 33 times per
// emit() and its 33rd call, the invocation's 34th, falls through.
//
//   utramp run tail_dispatch.bpf.o -- ./events_target emit 1 100
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

// libbpf 1.2 names it; it is BPF_KPROBE (Debian 12 has 1.1).
#ifndef BPF_UPROBE
#define BPF_UPROBE(name, args...) BPF_KPROBE(name, ##args)
#endif

enum { CASE0, CASE1, CASE2_RUNS, CASE2_LIMITED, NO_HANDLER, V_SUM, NSTATS };

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, NSTATS);
  __type(key, __u32);
  __type(value, __u64);
} stats SEC(".maps");

static __always_inline void add(__u32 k, __u64 n) {
  __u64* v = bpf_map_lookup_elem(&stats, &k);
  if (v) __sync_fetch_and_add(v, n);
}

int case0(struct pt_regs* ctx);
int case1(struct pt_regs* ctx);
int case2(struct pt_regs* ctx);

struct {
  __uint(type, BPF_MAP_TYPE_PROG_ARRAY);
  __uint(max_entries, 4);
  __uint(key_size, sizeof(__u32));
  __array(values, int(void*));
} handlers SEC(".maps") = {
    .values = {[0] = (void*)&case0, [1] = (void*)&case1, [2] = (void*)&case2},
};

SEC("uprobe")
int BPF_UPROBE(case0, int i, unsigned long v) {
  add(CASE0, 1);
  add(V_SUM, v);  // the context came along: emit's second argument
  return 0;
}

SEC("uprobe")
int BPF_UPROBE(case1, int i) {
  add(CASE1, 1);
  return 0;
}

SEC("uprobe")
int case2(struct pt_regs* ctx) {
  add(CASE2_RUNS, 1);
  bpf_tail_call(ctx, &handlers, 2);
  add(CASE2_LIMITED, 1);  // the 34th tail call of the invocation: refused, falls through
  return 0;
}

SEC("uprobe/emit")
int BPF_UPROBE(dispatch, int i) {
  bpf_tail_call(ctx, &handlers, (__u32)i % 4);
  add(NO_HANDLER, 1);  // slot 3: no program
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
