// usdt_target's probe with a semaphore: demo:guarded. The semaphore is declared as
// dtrace -G would: a counter in .probes that a tracer raises while it is attached. The
// probe's arguments are costly to compute, so the program computes them only then.
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#include <stdio.h>

unsigned short demo_guarded_semaphore __attribute__((section(".probes"), used));
#define DEMO_GUARDED_ENABLED() __builtin_expect(demo_guarded_semaphore != 0, 0)

int guarded_runs;

__attribute__((noinline)) static long costly(long i) {
  long s = 0;
  for (long k = 0; k <= i; ++k) s += k * k;
  return s;
}

__attribute__((noinline)) void guarded(int i) {
  if (DEMO_GUARDED_ENABLED()) {
    const long s = costly(i);
    DTRACE_PROBE2(demo, guarded, i, s);
    printf("target: demo:guarded %d %ld\n", i, s);
    ++guarded_runs;
  }
}
