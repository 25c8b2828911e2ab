// The program the eBPF examples trace: THREADS threads (default 4) each call work(i),
// may_fail(i) and take_order({id i, qty i % 3, price i % 7}) for i = 0..CALLS-1
// (default 1000), then it prints how many may_fail() calls failed. Every count the examples' maps hold follows from these two
// numbers, which is how the end-to-end tests check them exactly.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <utramp/utramp.h>

static int calls = 1000;
static volatile unsigned long sink;
static int failures;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

// Returns n % 5 after a little work that takes longer for larger n % 8.
__attribute__((noinline)) int work(int n) {
  unsigned long s = 0;
  for (int i = 0; i < (n % 8) * 50; ++i) s += (unsigned long)i * n;
  sink = s;
  return n % 5;
}

// An error-injectable function: 0 unless an fmod_ret program says otherwise.
__attribute__((noinline)) int may_fail(int x) {
  sink = (unsigned long)x;
  return 0;
}
UTRAMP_ALLOW_ERROR_INJECTION(may_fail);

// CO-RE's fixture (core_order.bpf.c is compiled with another layout of both types).
struct order {
  long id;
  int qty;
  int price;
};
enum order_state { ORDER_NEW = 10, ORDER_PAID = 11, ORDER_SHIPPED = 12 };
static volatile enum order_state last_state;

__attribute__((noinline)) long take_order(struct order* o) {
  last_state = o->qty ? ORDER_PAID : ORDER_NEW;
  return o->id + o->qty * o->price;
}

static void* thread_main(void* arg) {
  (void)arg;
  int failed = 0;
  for (int i = 0; i < calls; ++i) {
    work(i);
    if (may_fail(i) != 0) ++failed;
    struct order o = {i, i % 3, i % 7};
    sink = (unsigned long)take_order(&o);
  }
  pthread_mutex_lock(&mu);
  failures += failed;
  pthread_mutex_unlock(&mu);
  return NULL;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 4;
  if (argc > 2) calls = atoi(argv[2]);
  if (threads < 1 || threads > 64 || calls < 0) return 2;
  pthread_t t[64];
  for (int i = 0; i < threads; ++i) pthread_create(&t[i], NULL, thread_main, NULL);
  for (int i = 0; i < threads; ++i) pthread_join(t[i], NULL);
  printf("bpf_target: %d threads x %d calls, %d failures\n", threads, calls, failures);
  return 0;
}
