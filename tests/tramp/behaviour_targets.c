/* Targets for the behaviour tests (tramp_behaviour_test.cpp), built with compiler
 * patch sites. Bodies count their own runs so tests can tell a body run from a
 * program run. */
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <utramp/utramp.h>

/* Recursion guard: a program on tb_self calls tb_self; one on tb_sig raises a signal
 * whose handler calls tb_sig. */
atomic_int tb_self_body;
__attribute__((noinline, used)) int tb_self(int x) {
  atomic_fetch_add(&tb_self_body, 1);
  return x + 1;
}
atomic_int tb_sig_body;
__attribute__((noinline, used)) int tb_sig(int x) {
  atomic_fetch_add(&tb_sig_body, 1);
  return x + 1;
}

/* With `block` set: announces itself in *inside, then sleeps until *release is set. */
__attribute__((noinline, used)) int tb_sleepy(int block, atomic_int *inside, atomic_int *release) {
  if (block) {
    atomic_store(inside, 1);
    const struct timespec ts = {0, 1000000};
    while (!atomic_load(release)) nanosleep(&ts, 0);
  }
  return block + 40;
}

/* Sum of 0..n, one traced call per level. The call goes through a volatile pointer so
 * the compiler cannot turn the recursion into a loop. */
int tb_rec(int n);
int (*volatile tb_rec_next)(int) = tb_rec;
__attribute__((noinline, used)) int tb_rec(int n) { return n == 0 ? 0 : n + tb_rec_next(n - 1); }

__attribute__((noinline, used)) int tb_forked(int x) { return x * 3; }
__attribute__((noinline, used)) int tb_stats(int x) { return x ^ 0x55; }
