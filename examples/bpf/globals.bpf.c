// Global variables: `utramp run` prints every named global of .data, .bss and .rodata
// at the end (and with --interval), typed by the object's BTF: integers as numbers,
// bools as true/false, char arrays as strings, anything else as hex bytes.
//
//   utramp run globals.bpf.o -- ./bpf_target 1 100
//   @calls: 100
//   @lowest: -5
//   ...
#include <linux/bpf.h>
#include <stdbool.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

__u64 calls = 0;                      // .bss
bool saw_zero = false;                // .bss
int lowest = 1000000;                 // .data, signed: min(n) + threshold
char last_parity[8] = "none";         // .data: "even" or "odd", the last call's n
struct {
  __u32 a, b;
} pair = {1, 2};                      // .data: shown as hex bytes
const volatile int threshold = -5;    // .rodata

SEC("fentry/work")
int BPF_PROG(count_work, int n) {
  __sync_fetch_and_add(&calls, 1);
  if (n == 0) saw_zero = true;
  if (n + threshold < lowest) lowest = n + threshold;
  if (n % 2) __builtin_memcpy(last_parity, "odd", 4);
  else __builtin_memcpy(last_parity, "even", 5);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
