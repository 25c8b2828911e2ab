// The function bench_probe_cost probes. Built once per configuration (bench/CMakeLists.txt),
// each copy named by UTRAMP_BENCH_FN and compiled on its own by a fixed command (gcc -O2
// -fPIE), so every configuration has its own function with the same body:
//
//   imul eax, edi, 12345     (6 bytes: where the probes go; one instruction covers the
//   add  eax, 7               5 bytes a jump needs, so it can be optimised with threads
//   ret                       running)
//
// UTRAMP_BENCH_RAW_TRAP puts an int3 before the body: the raw trap round trip.
#ifndef UTRAMP_BENCH_FN
#error "define UTRAMP_BENCH_FN to the name of this copy"
#endif

__attribute__((noinline)) int UTRAMP_BENCH_FN(int x) {
#ifdef UTRAMP_BENCH_RAW_TRAP
  __asm__ volatile("int3");
#endif
  return x * 12345 + 7;
}
