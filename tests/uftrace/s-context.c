// uftrace-style test program: coroutines on stacks of their own (makecontext) that
// ping-pong through swapcontext while recursing on each; the first returns into the
// second through its uc_link (libc switches without calling setcontext through the PLT),
// the second into main.
#include <stdio.h>
#include <ucontext.h>

#define NOINLINE __attribute__((noinline))

static ucontext_t main_ctx, ctx_a, ctx_b;
static char stack_a[65536], stack_b[65536];
// The stores after each call keep the calls (no tail calls at -O2).
static volatile int sink;

NOINLINE void yield_to(ucontext_t* self, ucontext_t* other) {
  swapcontext(self, other);
  sink++;
}

NOINLINE void walk_a(int n) {
  if (n > 0)
    walk_a(n - 1);
  else
    yield_to(&ctx_a, &ctx_b);
  sink += n;
}

NOINLINE void walk_b(int n) {
  if (n > 0)
    walk_b(n - 1);
  else
    yield_to(&ctx_b, &ctx_a);
  sink += n;
}

NOINLINE void coro_a(void) {
  walk_a(2);
  walk_a(1);
  sink++;
}

NOINLINE void coro_b(void) {
  walk_b(2);
  walk_b(1);
  sink++;
}

NOINLINE void make_coro(ucontext_t* ctx, char* stack, size_t size, ucontext_t* link, void (*fn)(void)) {
  getcontext(ctx);
  ctx->uc_stack.ss_sp = stack;
  ctx->uc_stack.ss_size = size;
  ctx->uc_link = link;
  makecontext(ctx, fn, 0);
}

int main(void) {
  make_coro(&ctx_a, stack_a, sizeof stack_a, &ctx_b, coro_a);
  make_coro(&ctx_b, stack_b, sizeof stack_b, &main_ctx, coro_b);
  swapcontext(&main_ctx, &ctx_a);
  printf("%d\n", sink);
  return 0;
}
