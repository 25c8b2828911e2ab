/* The C equivalents of bench_ebpf_engines' looping programs, compiled apart with
 * gcc -O2 (bench/CMakeLists.txt): what a JIT's code is measured against. */
#include <stdbool.h>
#include <stdint.h>

/* The C conformance case prime.data was compiled from (its `-- c` section). */
__attribute__((noinline)) uint64_t utramp_bn_prime(uint64_t arg) {
  int i = 0;
  for (i = 2; i < arg; i++) {
    if (arg % i == 0) return false;
  }
  return true;
}

/* FNV-1a over a 256-byte buffer filled from the seed: byte i = ((i + 1) * seed) >> 8.
 * gcc -O2 vectorises the fill loop (since gcc 12); a JIT's code is scalar, so the
 * same body is also compiled without vectorising, for the scalar comparison. */
#define UTRAMP_BN_FNV_BODY                                                        \
  uint8_t buf[256];                                                               \
  for (uint64_t i = 0; i < 256; i++) buf[i] = (uint8_t)(((i + 1) * seed) >> 8);  \
  uint64_t h = 0xcbf29ce484222325ull;                                             \
  for (uint64_t i = 0; i < 256; i++) {                                            \
    h ^= buf[i];                                                                  \
    h *= 0x100000001b3ull;                                                        \
  }                                                                               \
  return h;

__attribute__((noinline)) uint64_t utramp_bn_fnv(uint64_t seed) { UTRAMP_BN_FNV_BODY }

#if defined(__GNUC__) && !defined(__clang__)
__attribute__((noinline, optimize("no-tree-vectorize")))
#else
__attribute__((noinline))
#endif
uint64_t utramp_bn_fnv_scalar(uint64_t seed) { UTRAMP_BN_FNV_BODY }
