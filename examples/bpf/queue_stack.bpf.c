// Queue, stack and bloom filter maps (bpf_map_push_elem, bpf_map_pop_elem,
// bpf_map_peek_elem) on events_target's emit(i, v), take() and check(v, present):
//
//   recent  a queue of the last 64 values (BPF_EXIST: a full queue drops its oldest)
//   first   a stack of the first 64 values (no flag: a full stack refuses, -E2BIG)
//   seen    a bloom filter of every value; check() tests it (never a false negative)
//   stats   counters, below
//
//   utramp run queue_stack.bpf.o -- ./events_target queue 1 100 10
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define E2BIG 7

struct {
  __uint(type, BPF_MAP_TYPE_QUEUE);
  __uint(max_entries, 64);
  __type(value, __u64);
} recent SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_STACK);
  __uint(max_entries, 64);
  __type(value, __u64);
} first SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_BLOOM_FILTER);
  __uint(max_entries, 4096);
  __type(value, __u64);
  __uint(map_extra, 3);  // hash functions
} seen SEC(".maps");

enum { PUSHED, STACK_FULL, POPPED, POPPED_SUM, PEEK_SUM, EMPTY, PRESENT_HITS, ABSENT_HITS, NSTATS };

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

SEC("fentry/emit")
int BPF_PROG(on_emit, int i, unsigned long v) {
  __u64 x = v;
  if (bpf_map_push_elem(&recent, &x, BPF_EXIST) == 0) add(PUSHED, 1);
  if (bpf_map_push_elem(&first, &x, BPF_ANY) == -E2BIG) add(STACK_FULL, 1);
  bpf_map_push_elem(&seen, &x, BPF_ANY);
  return 0;
}

SEC("fentry/take")
int BPF_PROG(on_take) {
  __u64 x;
  if (bpf_map_pop_elem(&recent, &x) == 0) {
    add(POPPED, 1);
    add(POPPED_SUM, x);
  } else {
    add(EMPTY, 1);
  }
  if (bpf_map_peek_elem(&first, &x) == 0) add(PEEK_SUM, x);
  return 0;
}

SEC("fentry/check")
int BPF_PROG(on_check, unsigned long v, int present) {
  __u64 x = v;
  if (bpf_map_peek_elem(&seen, &x) == 0) add(present ? PRESENT_HITS : ABSENT_HITS, 1);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
