// The target of tests/ebpf/bpf/ifunc_probes.bpf.c: calls glibc's strlen (an IFUNC) on
// a marked string N times, through a pointer so that no compiler folds it, and its own
// IFUNC ifunc_add N times; prints what it did.
//
//   ifunc_target N
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char kMark[] = "utramp-ifunc-mark-0123456789!";  // ifunc_probes.bpf.c: MARK

__attribute__((noinline)) static int add_plain(int a, int b) { return a + b; }
__attribute__((noinline)) static int add_swapped(int a, int b) { return b + a; }

// Chosen once, when the loader binds ifunc_add: the program's own IFUNC (as gcc's
// target_clones make them).
static int (*pick_add(void))(int, int) {
  volatile int swapped = 1;  // not folded: the resolver really chooses
  return swapped ? add_swapped : add_plain;
}
int ifunc_add(int a, int b) __attribute__((ifunc("pick_add")));

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 1000;
  size_t (*volatile len)(const char*) = strlen;
  char buf[sizeof kMark];
  size_t total = 0;
  long sum = 0;
  for (int i = 0; i < n; ++i) {
    memcpy(buf, kMark, sizeof kMark);
    total += len(buf);
    sum = ifunc_add((int)sum, i % 7);
  }
  printf("ifunc_target: %d strlen (%zu bytes), ifunc_add sum %ld\n", n, total, sum);
  return 0;
}
