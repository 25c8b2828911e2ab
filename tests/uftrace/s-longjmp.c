// uftrace-style test program: longjmp over traced frames (uftrace's s-longjmp.c shape).
#include <setjmp.h>

#define NOINLINE __attribute__((noinline))

static jmp_buf env;
static volatile int sink;

NOINLINE void bar(void) { longjmp(env, 1); }
NOINLINE void foo(void) {
  bar();
  sink = 1;
}
NOINLINE void after(void) { sink = 2; }

int main(void) {
  if (setjmp(env) == 0) foo();
  after();
  return 0;
}
