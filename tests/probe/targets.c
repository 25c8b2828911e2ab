/* C targets of the probe tests. */
#include <setjmp.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flow_targets.h"

#define NOINLINE __attribute__((noinline, noclone, used))

NOINLINE int pt_add(int a, int b) { return a + b; }
NOINLINE int pt_sub(int a, int b) { return a - b; }
NOINLINE int pt_other(int a) { return a ^ 0x5a; }

NOINLINE long pt_recurse(int depth) {
  if (depth <= 1) return 1;
  long r = pt_recurse(depth - 1);
  __asm__ volatile("" : "+r"(r));  /* a real call per level: no accumulator loop */
  return r + depth;
}

NOINLINE long pt_work(long x) {
  __asm__ volatile("" : "+r"(x));
  return x * 2 + 1;
}

/* Recurses `depth` times, then longjmps out from the deepest frame. */
NOINLINE int pt_jump_out(jmp_buf* env, int depth) {
  if (depth == 0) longjmp(*env, 7);
  int r = pt_jump_out(env, depth - 1);
  __asm__ volatile("" : "+r"(r));
  return r + 1;
}

/* Forks inside the probed function: both processes return through its frame. The child
 * exits with the value the parent will return, so the test can compare. */
NOINLINE long pt_fork_in(long x) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  __asm__ volatile("" ::: "memory");
  return x + 1000 * (pid == 0);
}

NOINLINE long pt_spin(long n) {
  long s = 0;
  for (long i = 0; i < n; ++i) {
    __asm__ volatile("" : "+r"(s));
    s += i ^ (s >> 3);
  }
  return s;
}

NOINLINE double pt_fsum(const double* v, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += v[i] * 1.5;
  return s;
}

NOINLINE long pt_call_cb(long (*cb)(long), long x) {
  long r = cb(x);
  __asm__ volatile("" : "+r"(r));
  return r + 1;
}
