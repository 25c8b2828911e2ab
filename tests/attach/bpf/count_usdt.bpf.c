// `utramp run -p` on a USDT probe with a semaphore (run_pid_test.cpp): attach_counter's
// attach_counter:tick, passed by every worker's iteration while its semaphore is raised,
// counted libbpf-style (usdt.bpf.h's BPF_USDT, as libbpf writes it) in the attach tests'
// map: key 0 every hit, key 1 the hits whose arguments are a worker's (its id, 0 to 7)
// and iteration (not negative), read through the note's operands. usdt.bpf.h wants the
// kernel's types (struct pt_regs, bool): the examples' vmlinux.h.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

#include "calls_total.bpf.h"

SEC("usdt//proc/self/exe:attach_counter:tick")
int BPF_USDT(on_tick, long id, long i) {
  count(0);
  if (id >= 0 && id < 8 && i >= 0) count(1);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
