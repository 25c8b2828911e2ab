// uftrace-style test program: a signal handler's calls nest under what it interrupted
// (uftrace's s-signal.c shape).
#include <signal.h>

#define NOINLINE __attribute__((noinline))

static volatile int sink;

NOINLINE void in_handler(int n) { sink += n; }
NOINLINE void handler(int sig) { in_handler(sig); }
NOINLINE void foo(void) { raise(SIGUSR1); }

int main(void) {
  signal(SIGUSR1, handler);
  foo();
  in_handler(0);
  return 0;
}
