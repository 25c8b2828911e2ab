// uftrace-style test program for record's filters (-F, -N, -D): a known call tree,
// recursion, a second thread and a longjmp out of a call. `sink` after each call keeps
// the compiler from turning it into a tail call (the tree must be the same at -O2).
#include <pthread.h>
#include <setjmp.h>

#define NOINLINE __attribute__((noinline))

static volatile int sink;
static jmp_buf env;

NOINLINE void d(void) { sink++; }
NOINLINE void c(void) {
  d();
  sink++;
}
NOINLINE void b(void) {
  c();
  d();
  sink++;
}
NOINLINE void e(void) { sink++; }
NOINLINE void a(void) {
  b();
  e();
  sink++;
}
NOINLINE void down(int n) {
  if (n > 0) down(n - 1);
  sink++;
}
NOINLINE void jump(void) { longjmp(env, 1); }
NOINLINE void leave(void) {
  c();
  jump();
  sink++;
}
NOINLINE void after(void) {
  d();
  sink++;
}
NOINLINE void* worker(void* arg) {
  b();
  sink++;
  return arg;
}
NOINLINE void threads(void) {
  pthread_t t;
  pthread_create(&t, 0, worker, 0);
  pthread_join(t, 0);
  sink++;
}

int main(void) {
  a();
  down(2);
  if (setjmp(env) == 0) leave();
  after();
  threads();
  return 0;
}
