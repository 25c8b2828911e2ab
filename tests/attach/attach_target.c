// A long-running process to attach to: WORKERS threads call work() in a loop and count
// their calls, one thread is blocked in read() on stdin, one sits in a SIGUSR1 handler
// (sent to itself) until the end. It prints "ready PID" once all are running; on "q"
// or the end of stdin it stops the workers and prints what it checked: every worker's
// results were right ("ok") and how many calls were made. Output never depends on
// timing, so a run that was attached to prints what an untouched one prints. With a
// second argument "sleep" each worker sleeps 1 ms after each call (a mostly idle
// process: bench/attach_pause.cpp).
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_WORKERS 64

static atomic_int g_stop;
static atomic_int g_running;
static atomic_int g_in_handler;
static atomic_int g_bad;
static int g_sleep;
static long g_calls[MAX_WORKERS];

__attribute__((noinline)) long work(long x) {
  // Something the compiler cannot fold: a checked sum.
  long s = 0;
  for (long i = 0; i < 16; ++i) s += (x + i) * 3;
  return s;
}

static void* worker(void* arg) {
  const long id = (long)arg;
  atomic_fetch_add(&g_running, 1);
  for (long i = 0; !atomic_load_explicit(&g_stop, memory_order_relaxed); ++i) {
    if (work(i) != 48 * i + 360) atomic_fetch_add(&g_bad, 1);
    g_calls[id]++;
    if (g_sleep) usleep(1000);
  }
  return NULL;
}

static void on_usr1(int sig) {
  (void)sig;
  atomic_store(&g_in_handler, 1);
  while (!atomic_load(&g_stop)) usleep(1000);
}

static void* handler_thread(void* arg) {
  (void)arg;
  pthread_kill(pthread_self(), SIGUSR1);  // runs the handler on this thread until the end
  return NULL;
}

int main(int argc, char** argv) {
  const int workers = argc > 1 ? atoi(argv[1]) : 8;
  if (workers < 0 || workers > MAX_WORKERS) return 2;
  g_sleep = argc > 2 && strcmp(argv[2], "sleep") == 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, NULL);
  pthread_t t[MAX_WORKERS + 1];
  for (long i = 0; i < workers; ++i) pthread_create(&t[i], NULL, worker, (void*)i);
  pthread_t h;
  pthread_create(&h, NULL, handler_thread, NULL);
  while (atomic_load(&g_running) < workers || !atomic_load(&g_in_handler)) usleep(1000);
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  char c = 0;
  while (read(0, &c, 1) == 1 && c != 'q') {  // the thread blocked in a system call
  }
  atomic_store(&g_stop, 1);
  long total = 0;
  for (int i = 0; i < workers; ++i) {
    pthread_join(t[i], NULL);
    total += g_calls[i];
  }
  pthread_join(h, NULL);
  printf("%s: %d workers, calls %s\n", atomic_load(&g_bad) ? "BAD" : "ok", workers,
         total > 0 || workers == 0 ? "made" : "none");
  return atomic_load(&g_bad) ? 1 : 0;
}
