// The target of the --metrics end-to-end test: calls step(n) for n = 0..N-1, prints
// "calls N" (its own count, which the test compares with what Prometheus scraped),
// then waits until the file STOP exists (at most 60 s) and exits.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) void step(int n) { sink += (unsigned long)n; }

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s N STOP\n", argv[0]);
    return 2;
  }
  const int n = atoi(argv[1]);
  int called = 0;
  for (int i = 0; i < n; ++i) {
    step(i);
    ++called;
  }
  printf("calls %d\n", called);
  fflush(stdout);
  const struct timespec tick = {0, 20 * 1000 * 1000};
  for (int i = 0; i < 3000 && access(argv[2], F_OK) != 0; ++i) nanosleep(&tick, NULL);
  return 0;
}
