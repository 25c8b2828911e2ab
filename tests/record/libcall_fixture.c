// Library calls made a known number of times, for tests/record/libcall_e2e_test.cpp:
// each step calls malloc, getpid, printf and free once; a library function calls back
// into the program (qsort's comparisons); longjmp and exit never return.
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static jmp_buf env;

__attribute__((noinline)) int by_value(const void* a, const void* b) {
  return *(const int*)a - *(const int*)b;
}

__attribute__((noinline)) void step(int i) {
  int* p = malloc(2 * sizeof(int));
  p[0] = 2 - i;
  p[1] = i;
  qsort(p, 2, sizeof(int), by_value);
  printf("step %d: %d %d, pid %s\n", i, p[0], p[1], getpid() > 0 ? "ok" : "bad");
  free(p);
}

__attribute__((noinline)) void leave(void) { longjmp(env, 1); }

int main(void) {
  volatile int n = 3;
  for (int i = 0; i < n; ++i) step(i);
  if (!setjmp(env)) leave();
  printf("done %d\n", n);
  fflush(stdout);
  exit(3);
}
