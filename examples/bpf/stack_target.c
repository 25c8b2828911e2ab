// The target of mallocstacks.bpf.c: malloc called along two known call paths, N and 2N
// times, with sizes of its own (so their stacks and totals can be checked exactly):
//
//   main -> path_a1 -> path_a2 -> path_a3 -> alloc_leaf -> malloc   N calls of 1000 bytes
//   main -> path_b1 -> alloc_leaf -> malloc                         2N calls of 2000 bytes
//
// Built by gcc and clang, at -O0 and -O2, with and without frame pointers (and once
// without unwind tables, for the frame-pointer walk). No function is inlined, cloned or
// left by a tail call (each does something after its call).
#include <stdio.h>
#include <stdlib.h>

#if defined(__clang__)
#define KEEP __attribute__((noinline))
#else
#define KEEP __attribute__((noipa))
#endif

void* volatile sink;
volatile size_t size_a = 1000, size_b = 2000;

KEEP void* alloc_leaf(size_t n) {
  void* p = malloc(n);
  sink = p;
  return p;
}

KEEP void path_a3(size_t n) {
  free(alloc_leaf(n));
  __asm__ volatile("" ::: "memory");
}
KEEP void path_a2(size_t n) {
  path_a3(n);
  __asm__ volatile("" ::: "memory");
}
KEEP void path_a1(size_t n) {
  path_a2(n);
  __asm__ volatile("" ::: "memory");
}
KEEP void path_b1(size_t n) {
  free(alloc_leaf(n));
  __asm__ volatile("" ::: "memory");
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 10;
  for (int i = 0; i < n; ++i) path_a1(size_a);
  for (int i = 0; i < 2 * n; ++i) path_b1(size_b);
  printf("stack_target: %d calls of path_a (%zu bytes), %d of path_b (%zu bytes)\n", n, size_a, 2 * n, size_b);
  return 0;
}
