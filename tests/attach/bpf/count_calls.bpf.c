// `utramp run -p` (run_pid_test.cpp): the calls of attach_counter's count_a (an fentry
// program) and count_b (a uprobe past its 5-byte compiler site: the site itself is
// made utramp's canonical NOP for the trampolines, and a probe wants the file's bytes),
// counted libbpf-style in an array map.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "calls_total.bpf.h"

SEC("fentry/count_a")
int BPF_PROG(on_count_a, long x) {
  count(0);
  return 0;
}

COUNT_B_UPROBE

char LICENSE[] SEC("license") = "GPL";
