// A program whose callers keep live values in call-clobbered registers across calls of
// small functions of the same file, as gcc's interprocedural register allocation
// (-fipa-ra, on from -O2) does when it knows what the callee clobbers. Built without
// site flags (every function is a relocated-prologue site) by gcc and clang at -O1, -O2
// and -O3 (tests/ipa_ra/CMakeLists.txt), it prints a checksum of everything it computed,
// the floating-point exception flags included; a tracer that changes any register the
// callee does not changes the checksum, or loops, or crashes.
//
//   ipa_fixture run       the workload once: "checksum N"
//   ipa_fixture capi      the workload untraced, then under C-API programs that clobber
//                         every call-clobbered register (and raise FE_INEXACT): fentry,
//                         fexit, fentry+fexit+fmod_ret, fmod_ret skipping the body; one
//                         line "MODE N" each, the first "untraced N". Each mode runs in a
//                         child forked for it: a relocated prologue is attached only
//                         while no other thread runs, and the first detach starts the
//                         reclaimer thread.
//   ipa_fixture capi-abi  the same with programs that raise no FP exception: for functions
//                         with a compiler site, where utramp keeps what the ABI requires
//                         and the MXCSR status flags are not part of that
//                         (scripts/ipa_ra_sweep.sh)
//   ipa_fixture capi-vec  (CPUs with AVX) the capi modes twice, the programs changing the
//                         AVX and AVX-512 state too, the checksum covering it: "clean-MODE
//                         N" with the upper halves of ymm/zmm0-15 zero at each call (utramp
//                         keeps the state with moves, and must zero what the programs
//                         dirtied), "dirty-MODE N" with them holding values (it keeps the
//                         state with XSAVE); zmm16-31 and k0-7 hold values in both.
//                         Exit 3 without AVX.
//   ipa_fixture capi-ret  functions returning a long double (st0), a double (xmm0), a
//                         two-register struct (rax:rdx) and an int, called in a loop and
//                         their results summed: "MODE LD D A B I FLAGS" for untraced, fexit,
//                         fmod_ret (continuing, no fexit), fexit+fmod_ret and
//                         fmod_ret-skip (the int's body skipped, the program returning
//                         kSkipValue: I becomes kSkipValue * g_n, the rest as untraced).
//
// The functions are noinline but not noipa (which would turn IPA-RA off for their
// callers), and noclone, so that each keeps its symbol.
#include <fenv.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utramp/utramp.h>

#if defined(__clang__)
#define LEAF __attribute__((noinline))
#else
#define LEAF __attribute__((noinline, noclone))
#endif

volatile int g_n = 40;  // keeps the compiler from folding the workload

LEAF int work(int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += (i * i) ^ (s >> 3);
  return s;
}

LEAF long mix3(long a, long b, long c) { return (a ^ (b << 7)) + c * 0x9e3779b1L; }

LEAF void bump(unsigned* p, unsigned v) { *p = *p * 33u + (v | 1u); }

LEAF double scale(double x, double k) { return x * k + 0.5; }

LEAF long many(long a, long b, long c, long d, long e, long f, long g, long h) {
  return ((a + 3 * b) ^ (c - d)) + e * 5 + (f ^ g) - h * 11;
}

// fmod_ret may attach here; its program skips the body by returning what it would.
LEAF int fmr(int x) { return x * 7 + 0x1234; }
UTRAMP_ALLOW_ERROR_INJECTION(fmr);

// capi-ret: one of each way a value comes back, the arithmetic exact (no FP exception).
LEAF long double ret_ld(long double x) { return x * 3 + 1; }
LEAF double ret_d(double x) { return x * 0.5 + 2; }
struct pair {
  long a, b;
};
LEAF struct pair ret_pair(long a, long b) {
  struct pair p = {a ^ (b << 3), a + b};
  return p;
}
LEAF int ret_int(int x) { return x * 5 + 3; }
UTRAMP_ALLOW_ERROR_INJECTION(ret_int);

static uint64_t workload(void) {
  feclearexcept(FE_ALL_EXCEPT);
  const int n = g_n;
  unsigned acc = 17;
  long l = 1;
  double d = 1.0, e = 0.25;  // exact arithmetic below: no FP exception of its own
  uint64_t sum = 0;
  for (int i = 0; i < n; ++i) {
    sum = sum * 31 + (uint64_t)work(100 + i);
    l = mix3(l, i, sum) + l;
    bump(&acc, (unsigned)i);
    d = scale(d, 1.0) - 0.5 + (double)(i & 3);
    e = scale(e, 2.0) - e - 0.5;
    l += many(i, l, sum, acc, n, i * 3, l >> 5, i + 7);
    sum += (uint64_t)fmr(i) ^ (uint64_t)acc;
  }
  const int raised = fetestexcept(FE_ALL_EXCEPT);  // before conversions that may raise some
  sum ^= (uint64_t)l * 3 + acc;
  sum += (uint64_t)(d * 4.0) + (uint64_t)(e * 8.0);
  return sum * 131 + (uint64_t)raised;
}

static int g_raise = 1;  // poison raises FE_INEXACT (not in capi-abi mode)

// capi-vec: 1 with AVX, 2 with AVX-512 (and the OS saving it). The vector state beyond
// SSE is written and read by inline assembly only; the rest of this file is compiled
// for plain x86-64, whose SSE code leaves the upper halves of ymm0-15 alone.
static int g_vec;
static const uint64_t kPattern[8] = {0x0123456789abcdefULL, 0xfedcba9876543210ULL,
                                     0x1111222233334444ULL, 0x5555666677778888ULL,
                                     0x9999aaaabbbbccccULL, 0xddddeeeeffff0000ULL,
                                     0x0f0f0f0f0f0f0f0fULL, 0xf0f0f0f0f0f0f0f0ULL};

// Everything vector a program may change beyond SSE, as compiled C calling AVX code
// that skips vzeroupper may: the upper halves of ymm0-15 (and zmm0-15), zmm16-31, k0-7.
static void poison_vec(void) {
  if (g_vec >= 1)
    __asm__ volatile(
        "vpcmpeqd %%ymm0, %%ymm0, %%ymm0\n\tvpcmpeqd %%ymm1, %%ymm1, %%ymm1\n\t"
        "vpcmpeqd %%ymm2, %%ymm2, %%ymm2\n\tvpcmpeqd %%ymm3, %%ymm3, %%ymm3\n\t"
        "vpcmpeqd %%ymm4, %%ymm4, %%ymm4\n\tvpcmpeqd %%ymm5, %%ymm5, %%ymm5\n\t"
        "vpcmpeqd %%ymm6, %%ymm6, %%ymm6\n\tvpcmpeqd %%ymm7, %%ymm7, %%ymm7\n\t"
        "vpcmpeqd %%ymm8, %%ymm8, %%ymm8\n\tvpcmpeqd %%ymm9, %%ymm9, %%ymm9\n\t"
        "vpcmpeqd %%ymm10, %%ymm10, %%ymm10\n\tvpcmpeqd %%ymm11, %%ymm11, %%ymm11\n\t"
        "vpcmpeqd %%ymm12, %%ymm12, %%ymm12\n\tvpcmpeqd %%ymm13, %%ymm13, %%ymm13\n\t"
        "vpcmpeqd %%ymm14, %%ymm14, %%ymm14\n\tvpcmpeqd %%ymm15, %%ymm15, %%ymm15\n\t"
        ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
        "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
  if (g_vec >= 2)
    __asm__ volatile(
        "vpternlogd $0xff, %%zmm0, %%zmm0, %%zmm0\n\tvpternlogd $0xff, %%zmm9, %%zmm9, %%zmm9\n\t"
        "vpternlogd $0xff, %%zmm16, %%zmm16, %%zmm16\n\tvpternlogd $0xff, %%zmm17, %%zmm17, %%zmm17\n\t"
        "vpternlogd $0xff, %%zmm20, %%zmm20, %%zmm20\n\tvpternlogd $0xff, %%zmm23, %%zmm23, %%zmm23\n\t"
        "vpternlogd $0xff, %%zmm28, %%zmm28, %%zmm28\n\tvpternlogd $0xff, %%zmm31, %%zmm31, %%zmm31\n\t"
        "kxnorw %%k0, %%k0, %%k0\n\tkxnorw %%k1, %%k1, %%k1\n\tkxnorw %%k5, %%k5, %%k5\n\t"
        "kxnorw %%k7, %%k7, %%k7\n\t"
        ::: "xmm0", "xmm9");
}

// Before a workload: zmm16-31 and k1-7 hold the pattern; the upper halves of ymm0-15
// (and zmm0-15) hold it too when `dirty`, else are zeroed. Lower halves stay as they are.
static void vec_set(int dirty) {
  if (dirty) {
    __asm__ volatile(
        "vinsertf128 $1, (%0), %%ymm0, %%ymm0\n\tvinsertf128 $1, (%0), %%ymm1, %%ymm1\n\t"
        "vinsertf128 $1, (%0), %%ymm2, %%ymm2\n\tvinsertf128 $1, (%0), %%ymm3, %%ymm3\n\t"
        "vinsertf128 $1, (%0), %%ymm4, %%ymm4\n\tvinsertf128 $1, (%0), %%ymm5, %%ymm5\n\t"
        "vinsertf128 $1, (%0), %%ymm6, %%ymm6\n\tvinsertf128 $1, (%0), %%ymm7, %%ymm7\n\t"
        "vinsertf128 $1, (%0), %%ymm8, %%ymm8\n\tvinsertf128 $1, (%0), %%ymm9, %%ymm9\n\t"
        "vinsertf128 $1, (%0), %%ymm10, %%ymm10\n\tvinsertf128 $1, (%0), %%ymm11, %%ymm11\n\t"
        "vinsertf128 $1, (%0), %%ymm12, %%ymm12\n\tvinsertf128 $1, (%0), %%ymm13, %%ymm13\n\t"
        "vinsertf128 $1, (%0), %%ymm14, %%ymm14\n\tvinsertf128 $1, (%0), %%ymm15, %%ymm15\n\t"
        :: "r"(kPattern) : "memory");
    if (g_vec >= 2)
      __asm__ volatile(
          "vinserti64x4 $1, (%0), %%zmm0, %%zmm0\n\tvinserti64x4 $1, (%0), %%zmm5, %%zmm5\n\t"
          "vinserti64x4 $1, (%0), %%zmm9, %%zmm9\n\tvinserti64x4 $1, (%0), %%zmm15, %%zmm15\n\t"
          :: "r"(kPattern) : "memory");
  } else {
    __asm__ volatile("vzeroupper");
  }
  if (g_vec >= 2)
    __asm__ volatile(
        "vmovdqu64 (%0), %%zmm16\n\tvmovdqu64 (%0), %%zmm17\n\tvmovdqu64 (%0), %%zmm18\n\t"
        "vmovdqu64 (%0), %%zmm19\n\tvmovdqu64 (%0), %%zmm20\n\tvmovdqu64 (%0), %%zmm21\n\t"
        "vmovdqu64 (%0), %%zmm22\n\tvmovdqu64 (%0), %%zmm23\n\tvmovdqu64 (%0), %%zmm24\n\t"
        "vmovdqu64 (%0), %%zmm25\n\tvmovdqu64 (%0), %%zmm26\n\tvmovdqu64 (%0), %%zmm27\n\t"
        "vmovdqu64 (%0), %%zmm28\n\tvmovdqu64 (%0), %%zmm29\n\tvmovdqu64 (%0), %%zmm30\n\t"
        "vmovdqu64 (%0), %%zmm31\n\t"
        "kmovw 2(%0), %%k1\n\tkmovw 4(%0), %%k2\n\tkmovw 6(%0), %%k3\n\tkmovw 8(%0), %%k4\n\t"
        "kmovw 10(%0), %%k5\n\tkmovw 12(%0), %%k6\n\tkmovw 14(%0), %%k7\n\t"
        :: "r"(kPattern) : "memory");
}

// After a workload: a hash of what vec_set set (the lower halves of ymm0-15 are the
// compiled code's and are left out).
static uint64_t vec_hash(void) {
  uint64_t y[16][4], z[32][8], k[8] = {0};
  __asm__ volatile(
      "vmovdqu %%ymm0, 0(%0)\n\tvmovdqu %%ymm1, 32(%0)\n\tvmovdqu %%ymm2, 64(%0)\n\t"
      "vmovdqu %%ymm3, 96(%0)\n\tvmovdqu %%ymm4, 128(%0)\n\tvmovdqu %%ymm5, 160(%0)\n\t"
      "vmovdqu %%ymm6, 192(%0)\n\tvmovdqu %%ymm7, 224(%0)\n\tvmovdqu %%ymm8, 256(%0)\n\t"
      "vmovdqu %%ymm9, 288(%0)\n\tvmovdqu %%ymm10, 320(%0)\n\tvmovdqu %%ymm11, 352(%0)\n\t"
      "vmovdqu %%ymm12, 384(%0)\n\tvmovdqu %%ymm13, 416(%0)\n\tvmovdqu %%ymm14, 448(%0)\n\t"
      "vmovdqu %%ymm15, 480(%0)\n\t"
      :: "r"(y) : "memory");
  uint64_t h = 0;
  for (int i = 0; i < 16; ++i) h = (h * 0x100000001b3ULL) ^ y[i][2] ^ (y[i][3] << 1);
  if (g_vec < 2) return h;
  __asm__ volatile(
      "vmovdqu64 %%zmm0, 0(%0)\n\tvmovdqu64 %%zmm5, 320(%0)\n\tvmovdqu64 %%zmm9, 576(%0)\n\t"
      "vmovdqu64 %%zmm15, 960(%0)\n\tvmovdqu64 %%zmm16, 1024(%0)\n\tvmovdqu64 %%zmm17, 1088(%0)\n\t"
      "vmovdqu64 %%zmm18, 1152(%0)\n\tvmovdqu64 %%zmm19, 1216(%0)\n\tvmovdqu64 %%zmm20, 1280(%0)\n\t"
      "vmovdqu64 %%zmm21, 1344(%0)\n\tvmovdqu64 %%zmm22, 1408(%0)\n\tvmovdqu64 %%zmm23, 1472(%0)\n\t"
      "vmovdqu64 %%zmm24, 1536(%0)\n\tvmovdqu64 %%zmm25, 1600(%0)\n\tvmovdqu64 %%zmm26, 1664(%0)\n\t"
      "vmovdqu64 %%zmm27, 1728(%0)\n\tvmovdqu64 %%zmm28, 1792(%0)\n\tvmovdqu64 %%zmm29, 1856(%0)\n\t"
      "vmovdqu64 %%zmm30, 1920(%0)\n\tvmovdqu64 %%zmm31, 1984(%0)\n\t"
      "kmovw %%k0, 0(%1)\n\tkmovw %%k1, 8(%1)\n\tkmovw %%k2, 16(%1)\n\tkmovw %%k3, 24(%1)\n\t"
      "kmovw %%k4, 32(%1)\n\tkmovw %%k5, 40(%1)\n\tkmovw %%k6, 48(%1)\n\tkmovw %%k7, 56(%1)\n\t"
      :: "r"(z), "r"(k) : "memory");
  static const int kZmm[] = {0, 5, 9, 15};  // the upper halves of these, all of zmm16-31
  for (int j = 0; j < 4; ++j)
    for (int w = 4; w < 8; ++w) h = (h * 0x100000001b3ULL) ^ z[kZmm[j]][w];
  for (int i = 16; i < 32; ++i)
    for (int w = 0; w < 8; ++w) h = (h * 0x100000001b3ULL) ^ z[i][w];
  for (int i = 1; i < 8; ++i) h = (h * 0x100000001b3ULL) ^ (k[i] & 0xffff);
  return h;
}

// A program that changes every call-clobbered general and SSE register and raises
// FE_INEXACT, as compiled C code may.
static uint64_t poison(uint64_t* ctx) {
  (void)ctx;
  __asm__ volatile(
      "mov $0x5a5a5a5a5a5a5a5a, %%rax\n\t"
      "mov %%rax, %%rcx\n\tmov %%rax, %%rdx\n\tmov %%rax, %%rsi\n\tmov %%rax, %%rdi\n\t"
      "mov %%rax, %%r8\n\tmov %%rax, %%r9\n\tmov %%rax, %%r10\n\tmov %%rax, %%r11\n\t"
      "movq %%rax, %%xmm0\n\tpshufd $0, %%xmm0, %%xmm0\n\t"
      "movdqa %%xmm0, %%xmm1\n\tmovdqa %%xmm0, %%xmm2\n\tmovdqa %%xmm0, %%xmm3\n\t"
      "movdqa %%xmm0, %%xmm4\n\tmovdqa %%xmm0, %%xmm5\n\tmovdqa %%xmm0, %%xmm6\n\t"
      "movdqa %%xmm0, %%xmm7\n\tmovdqa %%xmm0, %%xmm8\n\tmovdqa %%xmm0, %%xmm9\n\t"
      "movdqa %%xmm0, %%xmm10\n\tmovdqa %%xmm0, %%xmm11\n\tmovdqa %%xmm0, %%xmm12\n\t"
      "movdqa %%xmm0, %%xmm13\n\tmovdqa %%xmm0, %%xmm14\n\tmovdqa %%xmm0, %%xmm15\n\t"
      :
      :
      : "rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "xmm0", "xmm1", "xmm2",
        "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
        "xmm13", "xmm14", "xmm15", "memory");
  poison_vec();
  if (g_raise) {
    volatile double third = 1.0;
    third /= 3.0;  // inexact
  }
  return 0;
}

static int g_dirty;  // capi-vec: the upper halves hold values during the workload

// The workload as each mode measures it: with the vector state of capi-vec around it.
static uint64_t measured(void) {
  if (!g_vec) return workload();
  vec_set(g_dirty);
  const uint64_t sum = workload();
  return sum * 1000003u ^ vec_hash();
}

// fmod_ret on fmr: the body's result, computed here, so the body is skipped.
static uint64_t skip_fmr(uint64_t* ctx) {
  poison(ctx);
  return (uint64_t)(uint32_t)((int)ctx[0] * 7 + 0x1234);
}

// capi-ret's functions, with signatures (the fixture has no DWARF; the fallback would
// take every return for rax:rdx).
static void* const kRetFuncs[] = {(void*)ret_ld, (void*)ret_d, (void*)ret_pair, (void*)ret_int};
static const char* const kRetSigs[] = {"f80 -> f80", "f64 -> f64", "i64,i64 -> s16:ii",
                                       "i32 -> i32"};
enum { kNumRetFuncs = sizeof kRetFuncs / sizeof kRetFuncs[0] };
static const int kSkipValue = 4242;

static void* const kFuncs[] = {(void*)work, (void*)mix3,  (void*)bump,
                               (void*)scale, (void*)many, (void*)fmr};
// Half of them with a signature, half on the fallback (every argument register kept).
static const char* const kSigs[] = {"i32 -> i32", NULL, "ptr,u32 -> void",
                                    "f64,f64 -> f64", NULL, "i32 -> i32"};
enum { kNumFuncs = sizeof kFuncs / sizeof kFuncs[0], kMaxLinks = 3 * kNumFuncs };

static struct utramp_link* g_links[kMaxLinks];
static int g_nlinks;

static int attach(void* fn, const char* sig, enum utramp_attach_type type, utramp_prog_t prog) {
  struct utramp_attach_opts o;
  memset(&o, 0, sizeof o);
  o.sz = sizeof o;
  o.signature = sig;
  struct utramp_link* l = utramp_attach(fn, type, (void*)prog, &o);
  if (!l) {
    fprintf(stderr, "ipa_fixture: attach: %s\n", utramp_last_error());
    return -1;
  }
  g_links[g_nlinks++] = l;
  return 0;
}

static int detach_all(void) {
  for (int i = 0; i < g_nlinks; ++i)
    if (utramp_link_detach(g_links[i]) != 0) return -1;
  g_nlinks = 0;
  return 0;
}

// In a child: attaches the programs to every function (fmod_ret: to fmr only), runs
// the workload, detaches.
static int run_attached(const char* name, int fentry, int fexit, int fmod_ret,
                        utramp_prog_t fmod) {
  // One kind at a time: every site is patched by its first link, while this is the
  // only thread; later links only replace images (and start the reclaimer thread).
  for (int i = 0; i < kNumFuncs; ++i)
    if (fentry && attach(kFuncs[i], kSigs[i], UTRAMP_FENTRY, poison)) return -1;
  for (int i = 0; i < kNumFuncs; ++i)
    if (fexit && attach(kFuncs[i], kSigs[i], UTRAMP_FEXIT, poison)) return -1;
  if (fmod_ret && attach((void*)fmr, kSigs[kNumFuncs - 1], UTRAMP_FMOD_RET, fmod)) return -1;
  printf("%s%s %llu\n", g_vec ? (g_dirty ? "dirty-" : "clean-") : "", name,
         (unsigned long long)measured());
  fflush(stdout);
  return detach_all();
}

// capi-ret: the results as the callers saw them, and the FP exceptions raised meanwhile
// (a long double read from an empty x87 register is a NaN and raises FE_INVALID).
static void ret_workload(const char* name) {
  feclearexcept(FE_ALL_EXCEPT);
  const int n = g_n;
  long double ld = 0;
  double d = 0;
  long a = 0, b = 0, iv = 0;
  for (int i = 0; i < n; ++i) {
    ld += ret_ld(i + 0.25L);
    d += ret_d(i);
    const struct pair p = ret_pair(i, a);
    a ^= p.a;
    b += p.b;
    iv += ret_int(i);
  }
  const int raised = fetestexcept(FE_ALL_EXCEPT);
  printf("%s %La %a %ld %ld %ld %d\n", name, ld, d, a, b, iv, raised);
  fflush(stdout);
}

// fmod_ret on ret_int skipping the body with a value of its own.
static uint64_t skip_chosen(uint64_t* ctx) {
  poison(ctx);
  return kSkipValue;
}

static int g_ret;  // capi-ret: run_with runs ret_attached

// In a child, as run_attached: fexit on every function of capi-ret, fmod_ret on ret_int.
static int ret_attached(const char* name, int fexit, utramp_prog_t fmod) {
  for (int i = 0; i < kNumRetFuncs; ++i)
    if (fexit && attach(kRetFuncs[i], kRetSigs[i], UTRAMP_FEXIT, poison)) return -1;
  if (fmod && attach((void*)ret_int, kRetSigs[kNumRetFuncs - 1], UTRAMP_FMOD_RET, fmod)) return -1;
  ret_workload(name);
  return detach_all();
}

static int run_with(const char* name, int fentry, int fexit, int fmod_ret, utramp_prog_t fmod) {
  fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0)
    _exit((g_ret ? ret_attached(name, fexit, fmod)
                 : run_attached(name, fentry, fexit, fmod_ret, fmod)) ? 1 : 0);
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return -1;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    printf("%s died (status %#x)\n", name, st);
    return -1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "run") == 0) {
    printf("checksum %llu\n", (unsigned long long)workload());
    return 0;
  }
  if (argc == 2 && strcmp(argv[1], "capi-ret") == 0) {
    ret_workload("untraced");
    g_ret = 1;
    return run_with("fexit", 0, 1, 0, 0) || run_with("fmod_ret", 0, 0, 1, poison) ||
                   run_with("fexit+fmod_ret", 0, 1, 1, poison) ||
                   run_with("fmod_ret-skip", 0, 1, 1, skip_chosen)
               ? 1
               : 0;
  }
  if (argc == 2 && strcmp(argv[1], "capi-abi") == 0) g_raise = 0;
  if (argc == 2 && strcmp(argv[1], "capi-vec") == 0) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx")) return 3;
    g_vec = __builtin_cpu_supports("avx512f") ? 2 : 1;
  }
  if (argc == 2 && (strcmp(argv[1], "capi") == 0 || strcmp(argv[1], "capi-abi") == 0 ||
                    strcmp(argv[1], "capi-vec") == 0)) {
    for (g_dirty = 0; g_dirty <= (g_vec ? 1 : 0); ++g_dirty) {
      printf("%suntraced %llu\n", g_vec ? (g_dirty ? "dirty-" : "clean-") : "",
             (unsigned long long)measured());
      if (run_with("fentry", 1, 0, 0, 0) || run_with("fexit", 0, 1, 0, 0) ||
          run_with("fentry+fexit+fmod_ret", 1, 1, 1, poison) ||
          run_with("fmod_ret-skip", 0, 0, 1, skip_fmr))
        return 1;
    }
    return 0;
  }
  fprintf(stderr, "usage: ipa_fixture run|capi|capi-abi|capi-vec|capi-ret\n");
  return 2;
}
