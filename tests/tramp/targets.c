/* Targets for the trampoline tests, built with compiler patch sites. */
#include <stdint.h>
#include <utramp/utramp.h>

__attribute__((noinline, used)) int64_t tt_add(int64_t a, int64_t b) { return a + b; }
__attribute__((noinline, used)) double tt_mix(int a, double b, float c, long d) {
  return a + b * 2 + c * 3 + (double)d * 4;
}
__attribute__((noinline, used)) int tt_many(int a, int b, int c, int d, int e, int f, int g, int h) {
  return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h;
}
__attribute__((noinline, used)) int tt_check(int x) { return x > 0 ? 0 : -22; }
UTRAMP_ALLOW_ERROR_INJECTION(tt_check);
__attribute__((noinline, used)) int tt_unmarked(int x) { return x; }
__attribute__((noinline, used)) int tt_replace_me(int x) { return x + 1; }
__attribute__((noinline, used)) int tt_replacement(int x) { return x * 100; }
__attribute__((noinline, used)) double tt_mix2(int a, double b, float c, long d) {
  return a * b + c - (double)d;
}
