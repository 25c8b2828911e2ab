/* Targets and programs of the detach tests, shared by C and C++. */
#ifndef UTRAMP_TESTS_DETACH_TARGETS_H
#define UTRAMP_TESTS_DETACH_TARGETS_H

#include <stdint.h>

#ifdef __cplusplus
#include <atomic>
#define TD_ATOMIC(t) std::atomic<t>
extern "C" {
#else
#include <stdatomic.h>
#define TD_ATOMIC(t) _Atomic t
#endif

#define TD_LIVE 0x11fe5eed11fe5eedull
#define TD_DEAD 0xdeadbeefdeadbeefull
#define TD_INJECTED (-77)

/* A program's state, reached through the attach cookie. */
struct td_state {
  uint64_t magic; /* TD_LIVE, TD_DEAD once detached (then freed) */
  TD_ATOMIC(uint64_t) runs;
  TD_ATOMIC(int) inside, release, finished; /* td_block */
};

int64_t td_add(int64_t a, int64_t b);
int td_check(int x);
int td_sleepy(int block, TD_ATOMIC(int) *inside, TD_ATOMIC(int) *release);

/* The programs, near (in the test executable) and far (in libtramp_far_progs.so). */
#define TD_DECLARE(p)                                \
  extern TD_ATOMIC(unsigned long) p##dead_runs;      \
  uint64_t p##count(uint64_t *ctx);                  \
  uint64_t p##block(uint64_t *ctx);                  \
  uint64_t p##inject(uint64_t *ctx);
TD_DECLARE(near_)
TD_DECLARE(far_)
#undef TD_DECLARE

#ifdef __cplusplus
}
#endif

#endif
