// The function the trampoline configurations of bench_tramp_cost are attached to. Built
// once per configuration (bench/CMakeLists.txt), each copy named by UTRAMP_BENCH_FN and
// compiled on its own by a fixed command, so that every configuration has its own
// function with the same body (`lea eax, [rdi + 1]; ret`, or the one below for the
// copies compared with and without a compiler site) and the caller cannot inline it. Every copy is marked error-injectable, which only the fmod_ret copy needs.
#include <utramp/utramp.h>

#ifndef UTRAMP_BENCH_FN
#error "define UTRAMP_BENCH_FN to the name of this copy"
#endif

#ifndef UTRAMP_BENCH_LOAD
__attribute__((noinline)) int UTRAMP_BENCH_FN(int x) { return x + 1; }
#else
// UTRAMP_BENCH_LOAD: the same result from a load, `mov eax, [rip+one]; add eax, edi;
// ret`, whose first instruction (6 bytes) a site without a compiler NOP can relocate:
// the bare body is 4 bytes, too short for one.
#define UTRAMP_CAT2(a, b) a##b
#define UTRAMP_CAT(a, b) UTRAMP_CAT2(a, b)
int UTRAMP_CAT(UTRAMP_BENCH_FN, _one) = 1;
__attribute__((noinline)) int UTRAMP_BENCH_FN(int x) {
  return x + UTRAMP_CAT(UTRAMP_BENCH_FN, _one);
}
#endif
UTRAMP_ALLOW_ERROR_INJECTION(UTRAMP_BENCH_FN);
