// Bad input: a map type utramp does not provide (hash of maps) whose definition also
// has a field it does not read (values): the type is the reason given, not the field.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct inner {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} inner1 SEC(".maps");
struct {
  __uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
  __uint(max_entries, 4);
  __type(key, __u32);
  __array(values, struct inner);
} outer SEC(".maps") = {.values = {[0] = &inner1}};
SEC("fentry/work")
int prog(void* ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
