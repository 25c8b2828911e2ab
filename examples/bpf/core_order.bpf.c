// CO-RE against a user-space program: take_order(struct order *o) of bpf_target lays
// struct order out as { long id; int qty; int price; }, but this program is compiled
// with another layout (below). BPF_CORE_READ's relocations are resolved against
// bpf_target's DWARF when the program loads, so the right field is read.
//
//   utramp run core_order.bpf.o -- ./bpf_target
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

// This program's idea of the types: fields in another order, one the target lacks.
struct order {
  int qty;
  int price;
  long id;
  long discount;
} __attribute__((preserve_access_index));

enum order_state { ORDER_NEW = 0, ORDER_PAID = 1, ORDER_SHIPPED = 2 };

// [0] sum of prices, [1] sum of quantities, [2] discount exists (0/1),
// [3] struct order exists, [4] its size, [5] ORDER_SHIPPED's value, [6] calls.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 7);
  __type(key, __u32);
  __type(value, __u64);
} order_stats SEC(".maps");

static __always_inline void add(__u32 key, __u64 v) {
  __u64* c = bpf_map_lookup_elem(&order_stats, &key);
  if (c) __sync_fetch_and_add(c, v);
}

SEC("fentry/take_order")
int BPF_PROG(order_in, struct order* o) {
  add(0, (__u64)BPF_CORE_READ(o, price));
  add(1, (__u64)BPF_CORE_READ(o, qty));
  add(6, 1);
  if (bpf_core_field_exists(o->discount)) add(2, 1);
  if (bpf_core_type_exists(struct order)) add(3, 1);
  add(4, bpf_core_type_size(struct order));
  add(5, bpf_core_enum_value(enum order_state, ORDER_SHIPPED));
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
