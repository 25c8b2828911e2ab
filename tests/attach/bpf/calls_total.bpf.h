// What the attach tests' objects share: the map they count attach_counter's calls in
// (key 0 count_a's, key 1 count_b's: run_pid_test.cpp and clients_test.cpp read it at
// the end), and count_b's counter, a uprobe past its 5-byte compiler site (the site
// itself may be made utramp's canonical NOP for trampolines; a probe wants the file's
// bytes). Each object counts count_a its own way.
#pragma once

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, __u64);
} calls_total SEC(".maps");

static void count(__u32 k) {
  __u64* c = bpf_map_lookup_elem(&calls_total, &k);
  if (c) __sync_fetch_and_add(c, 1);
}

// Placed by each object after its count_a program (programs are listed in the object's
// order).
#define COUNT_B_UPROBE                      \
  SEC("uprobe//proc/self/exe:count_b+5")    \
  int on_count_b(void* ctx) {               \
    count(1);                               \
    return 0;                               \
  }
