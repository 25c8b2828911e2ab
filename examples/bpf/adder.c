// The program uprobe_sum.bpf.c and uprobe_add.bpf.c trace (built with gcc and with
// clang): for i = 1..N (default 1000) it calls uprobed_add(i, 2 * i) and
// uprobed_sub(3 * i, i), and prints what the functions themselves saw and returned, so
// that the end-to-end tests compare the programs' sums with the target's own.
#include <stdio.h>
#include <stdlib.h>

static long add_a, add_ret, sub_b, sub_ret;

__attribute__((noinline)) int uprobed_add(int a, int b) {
  add_a += a;
  return a + b;
}

__attribute__((noinline)) int uprobed_sub(int a, int b) {
  sub_b += b;
  return a - b;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1000;
  for (int i = 1; i <= n; ++i) {
    add_ret += uprobed_add(i, 2 * i);
    sub_ret += uprobed_sub(3 * i, i);
  }
  printf("adder: %d calls, add a %ld ret %ld, sub b %ld ret %ld\n", n, add_a, add_ret, sub_b, sub_ret);
  return 0;
}
