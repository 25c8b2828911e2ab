// The function whose per-call cost is measured. Built several times from this one file
// (bench/CMakeLists.txt), each copy named by UTRAMP_BENCH_FN and compiled on its own so
// that the caller cannot inline it: with and without -fpatchable-function-entry=5, by
// gcc and by clang. Every copy compiles to the same body: `lea eax, [rdi + 1]; ret`.
#ifndef UTRAMP_BENCH_FN
#error "define UTRAMP_BENCH_FN to the name of this copy"
#endif

__attribute__((noinline)) int UTRAMP_BENCH_FN(int x) { return x + 1; }
