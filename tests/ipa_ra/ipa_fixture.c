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
  if (g_raise) {
    volatile double third = 1.0;
    third /= 3.0;  // inexact
  }
  return 0;
}

// fmod_ret on fmr: the body's result, computed here, so the body is skipped.
static uint64_t skip_fmr(uint64_t* ctx) {
  poison(ctx);
  return (uint64_t)(uint32_t)((int)ctx[0] * 7 + 0x1234);
}

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
  printf("%s %llu\n", name, (unsigned long long)workload());
  fflush(stdout);
  return detach_all();
}

static int run_with(const char* name, int fentry, int fexit, int fmod_ret, utramp_prog_t fmod) {
  fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) _exit(run_attached(name, fentry, fexit, fmod_ret, fmod) ? 1 : 0);
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
  if (argc == 2 && strcmp(argv[1], "capi-abi") == 0) g_raise = 0;
  if (argc == 2 && (strcmp(argv[1], "capi") == 0 || strcmp(argv[1], "capi-abi") == 0)) {
    printf("untraced %llu\n", (unsigned long long)workload());
    if (run_with("fentry", 1, 0, 0, 0) || run_with("fexit", 0, 1, 0, 0) ||
        run_with("fentry+fexit+fmod_ret", 1, 1, 1, poison) ||
        run_with("fmod_ret-skip", 0, 0, 1, skip_fmr))
      return 1;
    return 0;
  }
  fprintf(stderr, "usage: ipa_fixture run|capi|capi-abi\n");
  return 2;
}
