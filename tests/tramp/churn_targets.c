/* Targets for the churn test (tramp_churn_test.cpp), built with compiler patch sites. */
#include <stdint.h>
#include <utramp/utramp.h>

__attribute__((noinline, used)) int64_t tc_add(int64_t a, int64_t b) { return a + b; }
__attribute__((noinline, used)) double tc_fma(double a, double b, int c) { return a * b + c; }
/* Error-injectable: fmod_ret may replace its result. */
__attribute__((noinline, used)) int tc_check(int x) { return x * 2 + 1; }
UTRAMP_ALLOW_ERROR_INJECTION(tc_check);
