/* The ABI fixture: the functions of abi_cases.h, built several times (CMakeLists.txt)
 * with gcc and clang at -O0 and -O2, each build's symbols prefixed with PFX:
 *
 *   abi_<cc>_<opt>_*   -fpatchable-function-entry=5: traced, signatures given
 *   dwf_<cc>_<opt>_*   -fpatchable-function-entry=5: traced, signatures from DWARF
 *   ref_<cc>_<opt>_*   no patch site, never traced: the untraced reference
 *
 * Every function folds every byte of every argument into a 64-bit hash, integers by
 * value after the usual conversion (so a narrow argument whose register was widened the
 * wrong way changes the result) and everything else by bytes, and builds its result from
 * that hash. Its twin rep_<name> (the freplace replacement) starts from another seed. */
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <utramp/utramp.h>

#include "abi_cases.h"

#ifndef PFX
#error "build with -DPFX=<prefix>"
#endif
#define ABI_CAT(a, b) a##b
#define ABI_XCAT(a, b) ABI_CAT(a, b)
#define F(name) ABI_XCAT(PFX, name)
#define UNPAREN(...) __VA_ARGS__
#define STR(x) #x
#define XSTR(x) STR(x)

#define NOINLINE __attribute__((noinline, used))

/* Expands `f` before UTRAMP_ALLOW_ERROR_INJECTION pastes it. The reference build is
 * never attached: nothing to mark. */
#ifdef ABI_REFERENCE
#define ALLOW(f)
#else
#define ALLOW(f) UTRAMP_ALLOW_ERROR_INJECTION(f);
#endif

static uint64_t mix64(uint64_t h, uint64_t v) {
  h ^= v;
  h *= 0x100000001b3ull;
  return h ^ (h >> 29);
}
static uint64_t mixb(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; ++i) h = mix64(h, b[i]);
  return h;
}
#define SEED(rep) (0xcbf29ce484222325ull ^ ((uint64_t)(rep) * 0x9e3779b97f4a7c15ull))
#define HV(x) h = mix64(h, (uint64_t)(x))             /* integers and pointers: by value */
#define HB(x) h = mixb(h, &(x), sizeof(x))            /* floating point, structs: by bytes */
#define HLD(x) h = mixb(h, &(x), 10)                  /* long double: its 10 value bytes */
#define HI128(x) (HV((uint64_t)(x)), HV((uint64_t)((x) >> 64)))

long F(sink);

/* Results derived from the hash. */
static double dbl_of(uint64_t h) { return (double)(int64_t)(h >> 11) * 0x1p-20; }
static float flt_of(uint64_t h) { return (float)(int32_t)(h >> 40) * 0.25f; }

#define BODY_ints HV(a); HV(b); HV(c); HV(d); HV(e); HV(f); return (long)h;
#define BODY_ptrs HV(base); HV(off); HV(q); HV(k); return base + off + (h & 0xfff);
#define BODY_floats HB(a); HB(b); HB(c); HB(d); return flt_of(h);
#define BODY_mix HV(a); HB(b); HV(c); HB(d); HV(e); HB(f); HV(g); HB(x); return dbl_of(h);
#define BODY_int10 HV(a1); HV(a2); HV(a3); HV(a4); HV(a5); HV(a6); HV(a7); HV(a8); HV(a9); \
  HV(a10); return (long)h;
#define BODY_dbl12 HB(x1); HB(x2); HB(x3); HB(x4); HB(x5); HB(x6); HB(x7); HB(x8); HB(x9); \
  HB(x10); HB(x11); HB(x12); return dbl_of(h);
#define BODY_spill HV(a); HB(d1); HV(b); HB(f1); HV(c); HB(d2); HV(d); HB(d3); HV(e); HB(d4); \
  HV(f); HB(d5); HB(d6); HB(d7); HB(d8); HV(g); HB(d9); HV(u); HB(f2); HV(k); return (long)h;
#define BODY_i128 HI128(a); HV(b); HI128(c); return (abi_i128)(((abi_u128)h << 64) | mix64(h, 1));
#define BODY_i128s HV(a1); HV(a2); HV(a3); HV(a4); HV(a5); HI128(x); HV(a6); HI128(y); \
  return (abi_i128)(((abi_u128)mix64(h, 2) << 64) | h);
#define BODY_i128odd HV(a1); HV(a2); HV(a3); HV(a4); HV(a5); HV(a6); HV(a7); HI128(x); \
  return (abi_i128)(((abi_u128)mix64(h, 3) << 64) | h);
#define BODY_sif HV(a.a); HB(a.b); HV(b); HV(c.a); HB(c.b); HB(d); \
  abi_if r = {(int)h, flt_of(h)}; return r;
#define BODY_sc3 HV(a.c[0]); HV(a.c[1]); HV(a.c[2]); HV(b); HB(c); \
  abi_c3 r = {{(char)h, (char)(h >> 8), (char)(h >> 16)}}; return r;
#define BODY_si3 HV(a.a); HV(a.b); HV(a.c); HB(b); HV(c); \
  abi_i3 r = {(int)h, (int)(h >> 32), (int)mix64(h, 4)}; return r;
#define BODY_sf3 HB(a); HB(b); abi_f3 r = {flt_of(h), flt_of(h << 8), flt_of(h << 16)}; return r;
#define BODY_sdd HB(a); HB(b); HB(c); abi_dd r = {dbl_of(h), dbl_of(mix64(h, 5))}; return r;
#define BODY_sld HV(a.a); HB(a.b); HB(b.a); HV(b.b); HV(c); \
  abi_ld r = {(long)h, dbl_of(mix64(h, 6))}; return r;
#define BODY_sdl HB(a); HV(b); abi_dl r = {dbl_of(h), (long)mix64(h, 7)}; return r;
#define BODY_sll HB(a); HB(b); HB(c); HB(d); abi_ll r = {(long)h, (long)mix64(h, 8)}; return r;
#define BODY_sspill HV(a1); HV(a2); HV(a3); HV(a4); HV(a5); HB(x); HV(a6); HB(d1); HB(d2); \
  HB(d3); HB(d4); HB(d5); HB(d6); HB(d7); HB(y); HB(d8); HB(z); return dbl_of(h);
#define BODY_mem HV(a); HB(b); HB(c); HB(d); HV(e); \
  b.c[0] = 0; d.a[0] = 0; /* the callee owns its copies: scribbling them is allowed */ \
  return (long)h;
#define BODY_retmem HV(a); HB(b); HV(c); abi_m40 r; \
  for (int i = 0; i < 5; ++i) { r.a[i] = (long)mix64(h, (uint64_t)i); } return r;
#define BODY_retm24 HV(a1); HV(a2); HV(a3); HV(a4); HV(a5); HV(a6); abi_m24 r; \
  for (int i = 0; i < 24; ++i) { r.c[i] = (char)mix64(h, (uint64_t)i); } return r;
#define BODY_ldbl HLD(a); HV(b); HLD(c); HB(d); \
  return (long double)(h >> 1) * -0.125L + a * c;
#define BODY_ret_i8 HV(a); HV(b); return (signed char)(h | 0x80); /* negative */
#define BODY_ret_u16 HV(a); HV(b); return (unsigned short)(h | 0x8000);
#define BODY_vsum HV(n); va_list ap; va_start(ap, n); \
  for (int i = 0; i < n; ++i) { HV(va_arg(ap, int)); } va_end(ap); return (long)h;
#define BODY_vdsum HV(n); va_list ap; va_start(ap, n); \
  for (int i = 0; i < n; ++i) { double x = va_arg(ap, double); HB(x); } \
  va_end(ap); return dbl_of(h);
#define BODY_vmix HV(mask); HV(n); va_list ap; va_start(ap, n); \
  for (int i = 0; i < n; ++i) { \
    if (mask >> i & 1) { double x = va_arg(ap, double); HB(x); } else HV(va_arg(ap, long)); \
  } \
  va_end(ap); return (long)h;
#define BODY_vset HV(v); HB(d); HB(s); F(sink) = (long)(h | 1);

#define GEN(name, R, P, sig, named, all)                        \
  NOINLINE R F(name) P { uint64_t h = SEED(0); BODY_##name }     \
  NOINLINE R F(rep_##name) P { uint64_t h = SEED(1); BODY_##name } \
  ALLOW(F(name))
ABI_CASES(GEN)
ABI_VOID_CASES(GEN)

/* Drivers: the call as each compiler writes it, through a volatile pointer so that it
 * is a real call of the exported function (no inlining, cloning or folding). */
#define DRIVE(name, R, P, sig, named, all)             \
  static void F(drive_##name)(void *out) {              \
    R(*volatile p) P = F(name);                         \
    R r = p all;                                        \
    memcpy(out, &r, sizeof r);                          \
  }                                                     \
  static void F(drive_rep_##name)(void *out) {          \
    R(*volatile p) P = F(rep_##name);                   \
    R r = p all;                                        \
    memcpy(out, &r, sizeof r);                          \
  }
#define DRIVE_VOID(name, R, P, sig, named, all)        \
  static void F(drive_##name)(void *out) {              \
    R(*volatile p) P = F(name);                         \
    F(sink) = 0;                                        \
    p all;                                              \
    memcpy(out, &F(sink), sizeof F(sink));              \
  }                                                     \
  static void F(drive_rep_##name)(void *out) {          \
    R(*volatile p) P = F(rep_##name);                   \
    F(sink) = 0;                                        \
    p all;                                              \
    memcpy(out, &F(sink), sizeof F(sink));              \
  }
ABI_CASES(DRIVE)
ABI_VOID_CASES(DRIVE_VOID)

/* noreturn: the process ends in the body. */
NOINLINE __attribute__((noreturn)) void F(noreturn)(int code) { _exit(code ^ 0x5a); }
NOINLINE __attribute__((noreturn)) void F(rep_noreturn)(int code) { _exit(code ^ 0x3c); }
ALLOW(F(noreturn))
static void F(drive_noreturn)(void *out) {
  void (*volatile p)(int) = F(noreturn);
  (void)out;
  p(ABI_NORETURN_CODE);
}
static void F(drive_rep_noreturn)(void *out) {
  void (*volatile p)(int) = F(rep_noreturn);
  (void)out;
  p(ABI_NORETURN_CODE);
}

#define ENTRY(name, R, P, sig, named, all) \
  {#name, sig, (void *)&F(name), (void *)&F(rep_##name), &F(drive_##name), &F(drive_rep_##name)},
static const struct abi_entry F(cases)[] = {ABI_CASES(ENTRY) ABI_VOID_CASES(ENTRY){0}};

#if defined(__clang__)
#define ABI_COMPILER "clang " __clang_version__
#define ABI_I128_PSABI (__clang_major__ >= 18)
#else
#define ABI_COMPILER "gcc " __VERSION__
#define ABI_I128_PSABI 1
#endif

const struct abi_build F(build) = {
    ABI_COMPILER, ABI_I128_PSABI, F(cases),
    {"noreturn", ABI_NORETURN_SIG, (void *)&F(noreturn), (void *)&F(rep_noreturn),
     &F(drive_noreturn), &F(drive_rep_noreturn)}};
