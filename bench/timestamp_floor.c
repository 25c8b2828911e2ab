// The timestamps' share of a traced call, for scripts/bench-record.sh: the loop of
// record_target.c with the two clock reads a function_graph tracer makes per call (one
// at entry, one at exit) done inline around the call and stored, and nothing else —
// the least any tracer that times every call with that clock can cost per call.
//
//   timestamp_floor N tsc      rdtsc (utramp, and XRay's default clock)
//   timestamp_floor N clock    clock_gettime(CLOCK_MONOTONIC) (uftrace's default)
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

volatile long sink;
unsigned long long times[64];  // where a tracer would write its records

__attribute__((noinline)) long tiny(long x) {
  sink = x;
  return x + 1;
}

static inline unsigned long long mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 10000000;
  const int use_clock = argc > 2 && strcmp(argv[2], "clock") == 0;
  long acc = 0;
  if (use_clock) {
    for (long i = 0; i < n; ++i) {
      times[(2 * i) & 63] = mono();
      acc = tiny(acc);
      times[(2 * i + 1) & 63] = mono();
    }
  } else {
    for (long i = 0; i < n; ++i) {
      times[(2 * i) & 63] = __rdtsc();
      acc = tiny(acc);
      times[(2 * i + 1) & 63] = __rdtsc();
    }
  }
  return acc == n ? 0 : 1;
}
