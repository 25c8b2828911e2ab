/* Targets of the detach tests (tramp_detach_test.cpp, tramp_detach_stress_test.cpp),
 * built with compiler patch sites. */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <utramp/utramp.h>

#include "detach_targets.h"

__attribute__((noinline, used)) int64_t td_add(int64_t a, int64_t b) { return a + b; }

/* Error-injectable: fmod_ret may replace its result. */
__attribute__((noinline, used)) int td_check(int x) { return x * 2 + 1; }
UTRAMP_ALLOW_ERROR_INJECTION(td_check);

/* With `block`, says it is inside and waits for `release`: a thread asleep in the body. */
__attribute__((noinline, used)) int td_sleepy(int block, atomic_int *inside, atomic_int *release) {
  if (block) {
    atomic_store(inside, 1);
    while (!atomic_load(release)) sched_yield();
  }
  return block + 40;
}
