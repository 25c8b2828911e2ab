// The program the perf event and queue/stack/bloom examples trace. It prints what it
// did, so the end-to-end tests check what `utramp run` shows against the target's own
// account (emit and burst on stderr, one write a line: `utramp run` streams records
// on stdout meanwhile, and a pipe keeps only writes of up to 4 KiB whole):
//
//   events_target emit THREADS CALLS   each thread calls emit(i, v) for i = 0..CALLS-1
//                                      (v a function of the thread and i) and prints
//                                      "thread TID calls CALLS chain H", H folding every
//                                      v in order (h = (h ^ v) * 1000003)
//   events_target burst CALLS          stops its parent (the CLI: the consumer), calls
//                                      burst(i, i) CALLS times while it is stopped, lets
//                                      it go on and prints "burst CALLS"
//   events_target queue THREADS CALLS TAKES
//                                      emit(i, v) as above (one thread also prints
//                                      "values v0 v1 ..."), then take() TAKES times,
//                                      check(v, 1) for every value emitted and
//                                      check(u, 0) for as many values never emitted
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile unsigned long sink;
static int calls;
static int nthreads;

// Bodies that differ, so that no compiler folds one function into another.
__attribute__((noinline)) void emit(int i, unsigned long v) { sink = v + (unsigned long)i; }
__attribute__((noinline)) void burst(int i, unsigned long v) { sink = v * 3 - (unsigned long)i; }
__attribute__((noinline)) void take(void) { sink = 17; }
__attribute__((noinline)) int check(unsigned long v, int present) {
  sink = v;
  return present;
}

// Distinct values per thread (t) and call (i); odd, so never one of check()'s absent
// values, which are even.
static unsigned long value_of(int t, int i) { return ((unsigned long)t << 32) + (unsigned long)i * 2654435761ul % 1000003ul * 2 + 1; }

static void* thread_main(void* arg) {
  const int t = (int)(long)arg;
  unsigned long h = 14695981039346656037ul;
  for (int i = 0; i < calls; ++i) {
    const unsigned long v = value_of(t, i);
    emit(i, v);
    h = (h ^ v) * 1000003ul;
  }
  fprintf(stderr, "thread %ld calls %d chain %lu\n", (long)syscall(SYS_gettid), calls, h);
  return NULL;
}

static int run_threads(void) {
  pthread_t th[64];
  for (int t = 0; t < nthreads; ++t) pthread_create(&th[t], NULL, thread_main, (void*)(long)t);
  for (int t = 0; t < nthreads; ++t) pthread_join(th[t], NULL);
  return 0;
}

// The parent's state letter from /proc/PID/stat ("PID (comm) S ..."); 0 if unreadable.
static char state_of(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  const size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char* p = strrchr(buf, ')');
  return p && p[1] == ' ' ? p[2] : 0;
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const char* mode = argv[1];
  if (!strcmp(mode, "emit") && argc == 4) {
    nthreads = atoi(argv[2]);
    calls = atoi(argv[3]);
    if (nthreads < 1 || nthreads > 64 || calls < 0) return 2;
    return run_threads();
  }
  if (!strcmp(mode, "burst") && argc == 3) {
    calls = atoi(argv[2]);
    const pid_t parent = getppid();
    // Stopped for certain before the burst: the consumer reads nothing meanwhile, so what
    // fits in the ring and what is lost follows from the sizes alone.
    kill(parent, SIGSTOP);
    int waited = 0;
    while (state_of(parent) != 'T' && waited++ < 10000) usleep(1000);
    if (state_of(parent) != 'T') {
      kill(parent, SIGCONT);
      fprintf(stderr, "parent %d did not stop\n", (int)parent);
      return 3;
    }
    for (int i = 0; i < calls; ++i) burst(i, (unsigned long)i);
    kill(parent, SIGCONT);
    fprintf(stderr, "burst %d\n", calls);
    return 0;
  }
  if (!strcmp(mode, "queue") && argc == 5) {
    nthreads = atoi(argv[2]);
    calls = atoi(argv[3]);
    const int takes = atoi(argv[4]);
    if (nthreads < 1 || nthreads > 64 || calls < 0 || takes < 0) return 2;
    if (nthreads == 1) {
      printf("values");
      for (int i = 0; i < calls; ++i) printf(" %lu", value_of(0, i));
      printf("\n");
    }
    run_threads();
    for (int k = 0; k < takes; ++k) take();
    for (int t = 0; t < nthreads; ++t)
      for (int i = 0; i < calls; ++i) check(value_of(t, i), 1);
    for (int t = 0; t < nthreads; ++t)
      for (int i = 0; i < calls; ++i) check(value_of(t, i) + 1, 0);
    return 0;
  }
  return 2;
}
