// The call-heavy program of scripts/bench-record.sh: `record_target N` makes N calls of
// one tiny function (plus main), nothing else. Built once per tracer, with the sites
// that tracer needs: -fpatchable-function-entry=5 (utramp), -pg (uftrace), XRay sleds
// (clang -fxray-instrument). Each build is timed traced and untraced. With
// RECORD_TARGET_CPU=1 in its environment it prints the loop's thread CPU time
// (`cpu_ns N` on stderr): steadier than wall time on a busy machine, and without the
// recorder's work (docs/benchmarks.md, "Filters").
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile long sink;

__attribute__((noinline)) long tiny(long x) {
  sink = x;
  return x + 1;
}

static long cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1000000000L + t.tv_nsec;
}

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 10000000;
  const int cpu = getenv("RECORD_TARGET_CPU") != NULL;
  const long start = cpu ? cpu_ns() : 0;
  long acc = 0;
  for (long i = 0; i < n; ++i) acc = tiny(acc);
  if (cpu) fprintf(stderr, "cpu_ns %ld\n", cpu_ns() - start);
  return acc == n ? 0 : 1;
}
