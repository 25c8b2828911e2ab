/* The programs of the detach tests, compiled twice: into the test executable (near its
 * targets: the images call them with `call rel32`) and into a shared library (out of
 * rel32 reach: the images load their address into a register), with the names given by
 * TD_PROG. Each reads its state through the attach cookie, which the tests free right
 * after detach: a run after detach reads freed memory (AddressSanitizer stops there) or
 * finds the state marked dead (counted). */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <utramp/utramp.h>

#include "detach_targets.h"

#define TD_CAT2(a, b) a##b
#define TD_CAT(a, b) TD_CAT2(a, b)
#define TD_PROG(name) TD_CAT(TD_PREFIX, name) /* TD_PREFIX: near_ or far_ */

static struct td_state *state_of(const uint64_t *ctx) {
  return (struct td_state *)(uintptr_t)utramp_get_attach_cookie(ctx);
}

atomic_ulong TD_PROG(dead_runs);

static int alive(struct td_state *s) {
  if (s->magic == TD_LIVE) return 1;
  atomic_fetch_add(&TD_PROG(dead_runs), 1);
  return 0;
}

uint64_t TD_PROG(count)(uint64_t *ctx) {
  struct td_state *s = state_of(ctx);
  if (alive(s)) atomic_fetch_add(&s->runs, 1);
  return 0;
}

/* Says it runs, then waits for its state's `release`. */
uint64_t TD_PROG(block)(uint64_t *ctx) {
  struct td_state *s = state_of(ctx);
  if (!alive(s)) return 0;
  atomic_store(&s->inside, 1);
  while (!atomic_load(&s->release)) sched_yield();
  atomic_fetch_add(&s->runs, 1);
  atomic_store(&s->finished, 1);
  return 0;
}

/* fmod_ret: injects TD_INJECTED for odd arguments. */
uint64_t TD_PROG(inject)(uint64_t *ctx) {
  struct td_state *s = state_of(ctx);
  if (!alive(s)) return 0;
  atomic_fetch_add(&s->runs, 1);
  return (ctx[0] & 1) ? (uint64_t)(int64_t)TD_INJECTED : 0;
}
