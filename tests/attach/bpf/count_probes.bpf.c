// Two clients side by side (clients_test.cpp) on builds whose entries run -p cannot
// change while threads run (gcc's five 1-byte NOPs): the calls of attach_counter's
// count_a and count_b counted by uprobes past their 5-byte compiler sites, which need
// no site of their own, in the same map as count_calls.bpf.c.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "calls_total.bpf.h"

SEC("uprobe//proc/self/exe:count_a+5")
int on_count_a(void* ctx) {
  count(0);
  return 0;
}

COUNT_B_UPROBE

char LICENSE[] SEC("license") = "GPL";
