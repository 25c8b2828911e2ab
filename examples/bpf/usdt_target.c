// The target of usdt_args.bpf.c: USDT probes made by systemtap's <sys/sdt.h> (Debian's
// systemtap-sdt-dev), with arguments of every size and signedness, constants, and a
// probe guarded by its semaphore (usdt_target_guarded.c). It prints, from inside,
// every value its probes pass, so that a test can compare them with what the eBPF
// programs read:
//
//   usdt_target N   ->  "target: demo:args I A0 A1 ..." per call, then the summary line
//
// Built by gcc and clang at -O0 and -O2: the arguments' locations then cover stack
// slots (-52(%rbp), 8(%rsp), -29(%rsp)), registers of every width (%dil, %dx, %r8d,
// %rax) and immediates ($-7).
#include <sys/sdt.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

// demo:guarded, whose semaphore it tests, is in usdt_target_guarded.c: <sys/sdt.h> gives
// every probe of a file a semaphore or none.
void guarded(int i);
extern int guarded_runs;

__attribute__((noinline)) void sizes(int8_t a, uint8_t b, int16_t c, uint16_t d, int32_t e, uint32_t f, int64_t g,
                                     uint64_t h, int i) {
  DTRACE_PROBE8(demo, args, a, b, c, d, e, f, g, h);
  printf("target: demo:args %d %d %u %d %u %d %u %lld %llu\n", i, a, b, c, d, e, f, (long long)g,
         (unsigned long long)h);
}

__attribute__((noinline)) void constants(void) {
  DTRACE_PROBE3(demo, consts, 5, -7, 123456789012LL);
  printf("target: demo:consts 5 -7 123456789012\n");
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 3;
  for (int i = 1; i <= n; ++i) {
    // Negative and high-bit values in every width: sign and zero extension show.
    sizes((int8_t)(-3 * i), (uint8_t)(250 + i), (int16_t)(-1000 * i), (uint16_t)(65000 + i), -100000 * i,
          4000000000u + (uint32_t)i, -5000000000LL * i, 18000000000000000000ull + (uint64_t)i, i);
    constants();
    guarded(i);
  }
  printf("usdt_target: %d calls, guarded ran %d times\n", n, guarded_runs);
  return 0;
}
