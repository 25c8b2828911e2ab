// An LPM trie as a routing table (BPF_MAP_TYPE_LPM_TRIE, longest-prefix lookups) on
// events_target's add_route(net, len, id), del_route(net, len) and route(addr):
//
//   routes  prefix -> route id, as the target adds and deletes them
//   hits    route id -> packets routed by it (0: no route), counted at route()
//
//   utramp run lpm_routes.bpf.o -- ./events_target route 1000
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>

struct ipv4_lpm_key {
  __u32 prefixlen;
  __u32 data;  // the address, network byte order
};

struct {
  __uint(type, BPF_MAP_TYPE_LPM_TRIE);
  __uint(max_entries, 64);
  __type(key, struct ipv4_lpm_key);
  __type(value, __u32);
  __uint(map_flags, BPF_F_NO_PREALLOC);
} routes SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 64);
  __type(key, __u32);
  __type(value, __u64);
} hits SEC(".maps");

SEC("fentry/add_route")
int BPF_PROG(on_add_route, __u32 net, int len, __u32 id) {
  struct ipv4_lpm_key key = {.prefixlen = len, .data = bpf_htonl(net)};
  bpf_map_update_elem(&routes, &key, &id, BPF_ANY);
  return 0;
}

SEC("fentry/del_route")
int BPF_PROG(on_del_route, __u32 net, int len) {
  struct ipv4_lpm_key key = {.prefixlen = len, .data = bpf_htonl(net)};
  bpf_map_delete_elem(&routes, &key);
  return 0;
}

SEC("fentry/route")
int BPF_PROG(on_route, __u32 addr) {
  struct ipv4_lpm_key key = {.prefixlen = 32, .data = bpf_htonl(addr)};
  __u32* id = bpf_map_lookup_elem(&routes, &key);
  __u32 k = id ? *id : 0;
  __u64 one = 1;
  __u64* n = bpf_map_lookup_elem(&hits, &k);
  if (n)
    __sync_fetch_and_add(n, 1);
  else
    bpf_map_update_elem(&hits, &k, &one, BPF_NOEXIST);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
