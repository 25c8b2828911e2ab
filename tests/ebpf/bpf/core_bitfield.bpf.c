// Bad input: a CO-RE bitfield read (field_lshift_u64 / field_rshift_u64 relocations),
// which the loader does not support.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
struct order {
  long id;
  unsigned int qty : 4;
  unsigned int price : 28;
} __attribute__((preserve_access_index));
SEC("fentry/take_order")
int BPF_PROG(bits, struct order* o) { return (int)BPF_CORE_READ_BITFIELD_PROBED(o, price); }
char LICENSE[] SEC("license") = "GPL";
