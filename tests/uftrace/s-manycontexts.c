// More coroutines than the tracer keeps execution stacks for (70, each left suspended
// inside a traced call, then resumed to its end): what it cannot follow is reported.
#include <stdio.h>
#include <ucontext.h>

#define NOINLINE __attribute__((noinline))
#define N 70

static ucontext_t main_ctx, ctx[N];
static char stacks[N][16384];
static volatile int sink;

NOINLINE void park(int i) {
  swapcontext(&ctx[i], &main_ctx);
  sink++;
}

NOINLINE void body(int i) {
  park(i);
  sink += i;
}

int main(void) {
  for (int i = 0; i < N; ++i) {
    getcontext(&ctx[i]);
    ctx[i].uc_stack.ss_sp = stacks[i];
    ctx[i].uc_stack.ss_size = sizeof stacks[i];
    ctx[i].uc_link = &main_ctx;
    makecontext(&ctx[i], (void (*)(void))body, 1, i);
  }
  for (int i = 0; i < N; ++i) swapcontext(&main_ctx, &ctx[i]);  // each parks itself
  for (int i = 0; i < N; ++i) swapcontext(&main_ctx, &ctx[i]);  // and ends
  printf("%d\n", sink);
  return 0;
}
