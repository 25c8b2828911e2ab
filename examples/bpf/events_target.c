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
//   events_target route CALLS          add_route(net, len, id) for a table of IPv4
//                                      routes, route(addr) CALLS times, del_route() of
//                                      two of them, route(addr) CALLS times again; it
//                                      routes each address itself (longest prefix) and
//                                      prints "route ID COUNT" per route id (0: none)
//   events_target alloc CALLS          try_alloc(i) and try_plain(i) for i = 0..CALLS-1;
//                                      prints "alloc CALLS failed N sum S plain M T": the
//                                      calls that returned non-zero and the sum of what
//                                      they returned, for each function (both return 0
//                                      unless a program overrides them)
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <utramp/utramp.h>

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
// bpf_override_return's targets: try_alloc is marked error-injectable, try_plain is not
// (a uprobe program may skip it only under `utramp run --allow-override`). Both return
// a volatile 0: clang 14 folds the constant a function returns into its callers even
// through UTRAMP_OVERRIDABLE's optnone, and the callers would then ignore the override.
static volatile int no_error;
UTRAMP_OVERRIDABLE int try_alloc(int i) {
  sink = (unsigned long)i;
  return no_error;
}
UTRAMP_ALLOW_ERROR_INJECTION(try_alloc);
UTRAMP_OVERRIDABLE int try_plain(int i) {
  sink = (unsigned long)i * 5;
  return no_error;
}
__attribute__((noinline)) void add_route(unsigned int net, int len, unsigned int id) { sink = net ^ (unsigned)len ^ id; }
__attribute__((noinline)) void del_route(unsigned int net, int len) { sink = net + (unsigned)len; }
__attribute__((noinline)) void route(unsigned int addr) { sink = addr * 7u; }

// The routing table of `route`: host-order networks, their prefix lengths and ids.
static const struct {
  unsigned int net;
  int len;
  unsigned int id;
} routes_table[] = {
    {0x0a000000u, 8, 1},   // 10.0.0.0/8
    {0x0a010000u, 16, 2},  // 10.1.0.0/16
    {0x0a010200u, 24, 3},  // 10.1.2.0/24
    {0xc0a80000u, 16, 4},  // 192.168.0.0/16
    {0x00000000u, 0, 5},   // 0.0.0.0/0
    {0x0a010280u, 25, 6},  // 10.1.2.128/25
    {0xac100000u, 12, 7},  // 172.16.0.0/12
};
enum { NROUTES = sizeof routes_table / sizeof routes_table[0] };

static int route_mode(int n) {
  int live[NROUTES];
  unsigned long count[NROUTES + 1] = {0};
  for (int r = 0; r < NROUTES; ++r) {
    add_route(routes_table[r].net, routes_table[r].len, routes_table[r].id);
    live[r] = 1;
  }
  // Addresses near each network (and elsewhere), from a fixed LCG.
  static const unsigned int bases[] = {0x0a000000u, 0x0a010000u, 0x0a010200u, 0xc0a80000u, 0x0b000000u, 0xac100000u};
  unsigned int x = 12345;
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {  // the default route and 10.1.0.0/16 go
      del_route(routes_table[4].net, routes_table[4].len);
      del_route(routes_table[1].net, routes_table[1].len);
      live[4] = live[1] = 0;
    }
    for (int i = 0; i < n; ++i) {
      x = x * 1103515245u + 12345u;
      const unsigned int base = bases[(x >> 16) % 6];
      x = x * 1103515245u + 12345u;
      const unsigned int addr = base | ((x >> 8) & (base == 0x0a010200u ? 0xffu : 0xffffu));
      route(addr);
      int best = -1;
      for (int r = 0; r < NROUTES; ++r) {
        const int len = routes_table[r].len;
        const unsigned int mask = len ? ~0u << (32 - len) : 0;
        if (live[r] && (addr & mask) == routes_table[r].net && (best < 0 || len > routes_table[best].len)) best = r;
      }
      ++count[best < 0 ? 0 : routes_table[best].id];
    }
  }
  for (int id = 0; id <= NROUTES; ++id)
    if (count[id]) printf("route %d %lu\n", id, count[id]);
  return 0;
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
  if (!strcmp(mode, "alloc") && argc == 3) {
    calls = atoi(argv[2]);
    if (calls < 0) return 2;
    long failed = 0, sum = 0, plain_failed = 0, plain_sum = 0;
    for (int i = 0; i < calls; ++i) {
      const int r = try_alloc(i);
      if (r) ++failed, sum += r;
      const int p = try_plain(i);
      if (p) ++plain_failed, plain_sum += p;
    }
    printf("alloc %d failed %ld sum %ld plain %ld %ld\n", calls, failed, sum, plain_failed, plain_sum);
    return 0;
  }
  if (!strcmp(mode, "route") && argc == 3) {
    calls = atoi(argv[2]);
    if (calls < 0) return 2;
    return route_mode(calls);
  }
  return 2;
}
