// uftrace-style test program: recursion (uftrace's s-fibonacci.c shape).
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

// Not a pure function to the optimiser: the volatile read keeps every call, and the
// store after them keeps gcc -O2 from turning the second call into a loop.
static volatile int one = 1, sink;

NOINLINE int fib(int n) {
  if (n <= 2) return one;
  const int r = fib(n - 1) + fib(n - 2);
  sink = r;
  return r;
}

int main(int argc, char** argv) { return fib(argc > 1 ? atoi(argv[1]) : 5) != 5; }
