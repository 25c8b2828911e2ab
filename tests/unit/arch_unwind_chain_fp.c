// A call chain for arch_unwind_test.cpp, built with -O2 and frame pointers: each
// function notes its own return address, and the leaf calls back with its registers.
#include <stdint.h>

#if defined(__clang__)
#define KEEP __attribute__((noinline))
#else
#define KEEP __attribute__((noipa))
#endif

typedef void (*chain_cb)(uint64_t ip, uint64_t sp, uint64_t bp);
uint64_t chain_fp_ras[4];

KEEP void chain_fp_leaf(chain_cb cb) {
  uint64_t ip, sp, bp;
  chain_fp_ras[0] = (uint64_t)__builtin_return_address(0);
  __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2" : "=r"(ip), "=r"(sp), "=r"(bp));
  cb(ip, sp, bp);
  __asm__ volatile("" ::: "memory");
}
KEEP void chain_fp_b(chain_cb cb) {
  volatile char pad[40];  /* a frame of its own */
  pad[0] = 1;
  __asm__ volatile("" ::"r"(pad));
  chain_fp_ras[1] = (uint64_t)__builtin_return_address(0);
  chain_fp_leaf(cb);
  __asm__ volatile("" ::: "memory");
}
KEEP void chain_fp_a(chain_cb cb) {
  chain_fp_ras[2] = (uint64_t)__builtin_return_address(0);
  chain_fp_b(cb);
  __asm__ volatile("" ::: "memory");
}
