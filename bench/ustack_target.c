// The target of scripts/bench-ustack.sh: N calls of leaf() at the bottom of a stack of
// exactly 10 frames as bpf_get_stackid sees it at leaf's entry: leaf, d5..d1, main,
// __libc_start_call_main, __libc_start_main, _start.
#include <stdio.h>
#include <stdlib.h>

#if defined(__clang__)
#define KEEP __attribute__((noinline))
#else
#define KEEP __attribute__((noipa))
#endif

volatile long sink;

KEEP void leaf(long i) { sink += i; }
KEEP void d5(long n) { for (long i = 0; i < n; ++i) leaf(i); __asm__ volatile("" ::: "memory"); }
KEEP void d4(long n) { d5(n); __asm__ volatile("" ::: "memory"); }
KEEP void d3(long n) { d4(n); __asm__ volatile("" ::: "memory"); }
KEEP void d2(long n) { d3(n); __asm__ volatile("" ::: "memory"); }
KEEP void d1(long n) { d2(n); __asm__ volatile("" ::: "memory"); }

int main(int argc, char** argv) {
  d1(argc > 1 ? atol(argv[1]) : 1000);
  printf("%ld\n", (long)sink);
  return 0;
}
