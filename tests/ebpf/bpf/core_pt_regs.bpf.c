// CO-RE on a uprobe's struct pt_regs, against a pt_regs declared here in another order
// than the kernel's (and utramp's) and with a register utramp does not have: each
// relocation kind must give utramp's layout, not this one (loader_test.cpp).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

struct pt_regs {
  long sp;           /* utramp: unsigned, at 152 */
  unsigned long di;  /* at 112 */
  unsigned long si;  /* at 104 */
  unsigned long fred_cs;  /* not in utramp's context */
} __attribute__((preserve_access_index));

// [0] di (a load at its relocated offset), [1] bpf_core_field_offset(si),
// [2] bpf_core_field_size(si), [3] bpf_core_field_exists(di),
// [4] bpf_core_field_exists(fred_cs), [5] bpf_core_field_signed(sp),
// [6] bpf_core_type_exists(struct pt_regs), [7] bpf_core_type_size(struct pt_regs).
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 8);
  __type(key, __u32);
  __type(value, __u64);
} got SEC(".maps");

static __always_inline void put(__u32 k, __u64 v) { bpf_map_update_elem(&got, &k, &v, BPF_ANY); }

SEC("uprobe/work")
int kinds(struct pt_regs* ctx) {
  put(0, ctx->di);
  put(1, bpf_core_field_offset(ctx->si));
  put(2, bpf_core_field_size(ctx->si));
  put(3, bpf_core_field_exists(ctx->di));
  put(4, bpf_core_field_exists(ctx->fred_cs));
  put(5, __builtin_preserve_field_info(ctx->sp, BPF_FIELD_SIGNED));
  put(6, bpf_core_type_exists(struct pt_regs));
  put(7, bpf_core_type_size(struct pt_regs));
  return 0;
}

// A register utramp's context does not have, read: refused by name.
SEC("uprobe/work")
int missing(struct pt_regs* ctx) {
  put(0, ctx->fred_cs);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
