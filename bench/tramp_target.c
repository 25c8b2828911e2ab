// The function the trampoline configurations of bench_tramp_cost are attached to. Built
// once per configuration (bench/CMakeLists.txt), each copy named by UTRAMP_BENCH_FN and
// compiled on its own by a fixed command, so that every configuration has its own
// function with the same body (`lea eax, [rdi + 1]; ret`) and the caller cannot inline
// it. Every copy is marked error-injectable, which only the fmod_ret copy needs.
#include <utramp/utramp.h>

#ifndef UTRAMP_BENCH_FN
#error "define UTRAMP_BENCH_FN to the name of this copy"
#endif

__attribute__((noinline)) int UTRAMP_BENCH_FN(int x) { return x + 1; }
UTRAMP_ALLOW_ERROR_INJECTION(UTRAMP_BENCH_FN);
