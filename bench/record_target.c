// The call-heavy program of scripts/bench-record.sh: `record_target N` makes N calls of
// one tiny function (plus main), nothing else. Built once per tracer, with the sites
// that tracer needs: -fpatchable-function-entry=5 (utramp), -pg (uftrace), XRay sleds
// (clang -fxray-instrument). Each build is timed traced and untraced.
#include <stdlib.h>

volatile long sink;

__attribute__((noinline)) long tiny(long x) {
  sink = x;
  return x + 1;
}

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 10000000;
  long acc = 0;
  for (long i = 0; i < n; ++i) acc = tiny(acc);
  return acc == n ? 0 : 1;
}
