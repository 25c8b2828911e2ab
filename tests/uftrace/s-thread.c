// uftrace-style test program: threads (uftrace's s-thread.c shape). The threads run one
// after the other, so the replay's order of events is the same in every run.
#include <pthread.h>

#define NOINLINE __attribute__((noinline))

static volatile int sink;

NOINLINE void work(int n) { sink += n; }
NOINLINE void* thread_main(void* arg) {
  work((int)(long)arg);
  return 0;
}
NOINLINE void run(int n) {
  pthread_t t;
  pthread_create(&t, 0, thread_main, (void*)(long)n);
  pthread_join(t, 0);
}

int main(void) {
  run(1);
  run(2);
  return 0;
}
