/* The System V x86-64 ABI cases of the trampoline tests: one list read by the C fixture
 * (abi_targets.c, built with gcc and clang at -O0 and -O2) and by the C++ test.
 *
 * ABI_CASES(X) rows are X(name, return type, parameters, signature, named arguments,
 * all arguments). The C file defines each function, a twin with another result (the
 * freplace replacement), and drivers that call both with `all arguments` through a
 * volatile pointer, so the caller side too is compiled by each compiler. The test takes
 * the `named arguments` converted to the parameter types, exactly as the call converts
 * them, and derives the ctx slots programs must see.
 *
 * Struct classes (psABI §3.2.3), with the signature form of each:
 *   abi_if  {int, float}        8  one INTEGER eightbyte (the float shares it)  s8:i
 *   abi_ff  {float, float}      8  one SSE eightbyte                            s8:s
 *   abi_c3  {char[3]}           3  INTEGER, an odd size                         s3:i
 *   abi_i3  {int, int, int}    12  INTEGER, INTEGER (second one 4 bytes)        s12:ii
 *   abi_f3  {float x3}         12  SSE, SSE (second one 4 bytes)                s12:ss
 *   abi_dd  {double, double}   16  SSE, SSE                                     s16:ss
 *   abi_ld  {long, double}     16  INTEGER, SSE                                 s16:is
 *   abi_dl  {double, long}     16  SSE, INTEGER                                 s16:si
 *   abi_ll  {long, long}       16  INTEGER, INTEGER                             s16:ii
 *   abi_m24 {char[24]}         24  MEMORY                                       m24
 *   abi_m40 {long[5]}          40  MEMORY                                       m40
 * None has padding, so every byte of a value is part of it. */
#ifndef UTRAMP_TESTS_ABI_CASES_H
#define UTRAMP_TESTS_ABI_CASES_H

#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct { int a; float b; } abi_if;
typedef struct { float a, b; } abi_ff;
typedef struct { char c[3]; } abi_c3;
typedef struct { int a, b, c; } abi_i3;
typedef struct { float a, b, c; } abi_f3;
typedef struct { double a, b; } abi_dd;
typedef struct { long a; double b; } abi_ld;
typedef struct { double a; long b; } abi_dl;
typedef struct { long a, b; } abi_ll;
typedef struct { char c[24]; } abi_m24;
typedef struct { long a[5]; } abi_m40;
__extension__ typedef __int128 abi_i128;
__extension__ typedef unsigned __int128 abi_u128;

/* A struct value in an argument list, in C and in C++. */
#ifdef __cplusplus
#define ABI_MK(T, ...) T{__VA_ARGS__}
#else
#define ABI_MK(T, ...) ((T){__VA_ARGS__})
#endif
#define ABI_I128(hi, lo) ((abi_i128)(((abi_u128)(uint64_t)(int64_t)(hi) << 64) | (abi_u128)(uint64_t)(lo)))

#define ABI_M24_A ABI_MK(abi_m24, {'m', 'e', 'm', 'o', 'r', 'y', 0, 1, 2, 3, 4, 5, 6, 7, -8, -9, 10, 11, 12, 13, 14, 15, 16, -17})
#define ABI_M24_B ABI_MK(abi_m24, {-1, -2, -3, -4, -5, -6, -7, -8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24})
#define ABI_M40_A ABI_MK(abi_m40, {-1L, 0x0102030405060708L, -0x1122334455667788L, 42L, 0x7fffffffffffffffL})

/* Arguments shared by several rows. */
#define ABI_ARGS_I10 (0x1122334455667788L, -2, -3L, (short)-1234, 5L, (signed char)-6, 0x7fffffff, (short)-32768, (signed char)-128, -0x0102030405060708L)
#define ABI_ARGS_D12 (1.25, -2.5, 3.125, -4.0625, 5e300, -6e-300, 7.0, -8.5, 9.75f, -10.125, -0.0f, 1.0 / 3.0)
#define ABI_ARGS_SPILL                                                                   \
  (-1, 0.5, 0x0123456789abcdefL, 1.5f, -3, -2.75, -4L, 3.0e10, 5, -4.5e-10, -6L, 5.5, 6.25,  \
   -7.125, 8.0625, -9, 9.5, (unsigned char)0xfe, -10.5f, 0x7edcba9876543210L)
#define ABI_ARGS_SSPILL                                                                  \
  (1L, -2L, 3L, -4L, 5L, ABI_MK(abi_ll, -0x1111L, 0x2222333344445555L), -6L, 1.5, -2.5, 3.5, \
   -4.5, 5.5, -6.5, 7.5, ABI_MK(abi_dd, -8.25, 9.125), -10.75, ABI_MK(abi_ld, -12L, 13.0625))
#define ABI_ARGS_VSUM (10, 1, -2, 3, -4, 5, -6, 7, -8, 9, -10)
#define ABI_ARGS_VDSUM (11, 0.5, -1.5, 2.5, -3.5, 4.5, -5.5, 6.5, -7.5, 8.5, -9.5, 1e100)
/* bit i of the mask: the i-th variadic argument is a double, else a long */
#define ABI_ARGS_VMIX (0x2d2u, 14, 1L, -0.5, 2L, 3L, 1.5, -4L, 2.5, -3.5, 5L, 4.5, -6L, 7L, 8L, -9L)

#define ABI_CASES(X)                                                                          \
  X(ints, long, (signed char a, unsigned char b, short c, unsigned short d, bool e, int f),    \
    "i8,u8,i16,u16,u8,i32 -> i64", ((signed char)-5, 250, (short)-1234, 60000, true, -7),     \
    ((signed char)-5, 250, (short)-1234, 60000, true, -7))                                    \
  X(ptrs, char *, (char *base, long off, const void *q, int k), "ptr,i64,ptr,i32 -> ptr",     \
    ((char *)0x7f0012345000, 77L, (const void *)0x1111222233334444, -3),                      \
    ((char *)0x7f0012345000, 77L, (const void *)0x1111222233334444, -3))                      \
  X(floats, float, (float a, double b, float c, float d), "f32,f64,f32,f32 -> f32",           \
    (1.5f, -2.25, 3.0e-20f, -0.0f), (1.5f, -2.25, 3.0e-20f, -0.0f))                            \
  X(mix, double,                                                                              \
    (int a, float b, long c, double d, char *e, float f, unsigned short g, double x),         \
    "i32,f32,i64,f64,ptr,f32,u16,f64 -> f64",                                                 \
    (-1, 2.5f, -3L, 4.75, (char *)0x5000, -6.5f, 65535, -8e-8),                                \
    (-1, 2.5f, -3L, 4.75, (char *)0x5000, -6.5f, 65535, -8e-8))                                \
  X(int10, long,                                                                              \
    (long a1, int a2, long a3, short a4, long a5, signed char a6, int a7, short a8,           \
     signed char a9, long a10),                                                               \
    "i64,i32,i64,i16,i64,i8,i32,i16,i8,i64 -> i64", ABI_ARGS_I10, ABI_ARGS_I10)               \
  X(dbl12, double,                                                                            \
    (double x1, double x2, double x3, double x4, double x5, double x6, double x7, double x8,   \
     float x9, double x10, float x11, double x12),                                            \
    "f64,f64,f64,f64,f64,f64,f64,f64,f32,f64,f32,f64 -> f64", ABI_ARGS_D12, ABI_ARGS_D12)     \
  X(spill, long,                                                                              \
    (int a, double d1, long b, float f1, int c, double d2, long d, double d3, int e,          \
     double d4, long f, double d5, double d6, double d7, double d8, int g, double d9,         \
     unsigned char u, float f2, long k),                                                      \
    "i32,f64,i64,f32,i32,f64,i64,f64,i32,f64,i64,f64,f64,f64,f64,i32,f64,u8,f32,i64 -> i64",  \
    ABI_ARGS_SPILL, ABI_ARGS_SPILL)                                                           \
  X(i128, abi_i128, (abi_i128 a, long b, abi_i128 c), "i128,i64,i128 -> i128",                \
    (ABI_I128(-2, 0x0123456789abcdef), -3L, ABI_I128(0x7edcba9876543210, 5)),                  \
    (ABI_I128(-2, 0x0123456789abcdef), -3L, ABI_I128(0x7edcba9876543210, 5)))                  \
  /* x takes the stack (one register left), a6 the register, y the stack */                  \
  X(i128s, abi_i128,                                                                          \
    (long a1, long a2, long a3, long a4, long a5, abi_i128 x, long a6, abi_i128 y),           \
    "i64,i64,i64,i64,i64,i128,i64,i128 -> i128",                                              \
    (1L, 2L, 3L, 4L, 5L, ABI_I128(-6, 7), 8L, ABI_I128(9, -10)),                              \
    (1L, 2L, 3L, 4L, 5L, ABI_I128(-6, 7), 8L, ABI_I128(9, -10)))                              \
  /* a7 takes the first stack slot, so x (16-byte aligned on the stack) skips one */        \
  X(i128odd, abi_i128,                                                                        \
    (long a1, long a2, long a3, long a4, long a5, long a6, long a7, abi_i128 x),              \
    "i64,i64,i64,i64,i64,i64,i64,i128 -> i128", (1L, 2L, 3L, 4L, 5L, 6L, -7L, ABI_I128(-8, 9)), \
    (1L, 2L, 3L, 4L, 5L, 6L, -7L, ABI_I128(-8, 9)))                                             \
  X(sif, abi_if, (abi_if a, int b, abi_if c, abi_ff d), "s8:i,i32,s8:i,s8:s -> s8:i",         \
    (ABI_MK(abi_if, -1, 2.5f), 3, ABI_MK(abi_if, 4, -5.25f), ABI_MK(abi_ff, 6.5f, -7.75f)),   \
    (ABI_MK(abi_if, -1, 2.5f), 3, ABI_MK(abi_if, 4, -5.25f), ABI_MK(abi_ff, 6.5f, -7.75f)))   \
  X(sc3, abi_c3, (abi_c3 a, signed char b, abi_c3 c), "s3:i,i8,s3:i -> s3:i",                 \
    (ABI_MK(abi_c3, {1, -2, 3}), (signed char)-4, ABI_MK(abi_c3, {-5, 6, -7})),               \
    (ABI_MK(abi_c3, {1, -2, 3}), (signed char)-4, ABI_MK(abi_c3, {-5, 6, -7})))               \
  X(si3, abi_i3, (abi_i3 a, abi_f3 b, int c), "s12:ii,s12:ss,i32 -> s12:ii",                  \
    (ABI_MK(abi_i3, -1, 0x22222222, -3), ABI_MK(abi_f3, 4.5f, -5.5f, 6.5f), 7),               \
    (ABI_MK(abi_i3, -1, 0x22222222, -3), ABI_MK(abi_f3, 4.5f, -5.5f, 6.5f), 7))               \
  X(sf3, abi_f3, (abi_f3 a, float b), "s12:ss,f32 -> s12:ss",                                 \
    (ABI_MK(abi_f3, -1.5f, 2.5f, -3.5f), 4.25f), (ABI_MK(abi_f3, -1.5f, 2.5f, -3.5f), 4.25f)) \
  X(sdd, abi_dd, (abi_dd a, double b, abi_dd c), "s16:ss,f64,s16:ss -> s16:ss",               \
    (ABI_MK(abi_dd, 1.5, -2.5), 3.5, ABI_MK(abi_dd, -4.5, 5e-300)),                           \
    (ABI_MK(abi_dd, 1.5, -2.5), 3.5, ABI_MK(abi_dd, -4.5, 5e-300)))                           \
  X(sld, abi_ld, (abi_ld a, abi_dl b, int c), "s16:is,s16:si,i32 -> s16:is",                  \
    (ABI_MK(abi_ld, -1L, 2.5), ABI_MK(abi_dl, -3.5, 0x4444555566667777L), -8),                \
    (ABI_MK(abi_ld, -1L, 2.5), ABI_MK(abi_dl, -3.5, 0x4444555566667777L), -8))                \
  X(sdl, abi_dl, (abi_dl a, long b), "s16:si,i64 -> s16:si",                                  \
    (ABI_MK(abi_dl, -0.125, -2L), 3L), (ABI_MK(abi_dl, -0.125, -2L), 3L))                     \
  /* d has no registers left: it goes on the stack whole */                                  \
  X(sll, abi_ll, (abi_ll a, abi_ll b, abi_ll c, abi_ll d), "s16:ii,s16:ii,s16:ii,s16:ii -> s16:ii", \
    (ABI_MK(abi_ll, 1L, -2L), ABI_MK(abi_ll, 3L, -4L), ABI_MK(abi_ll, 5L, -6L),               \
     ABI_MK(abi_ll, 0x7777L, -0x888888888L)),                                                 \
    (ABI_MK(abi_ll, 1L, -2L), ABI_MK(abi_ll, 3L, -4L), ABI_MK(abi_ll, 5L, -6L),               \
     ABI_MK(abi_ll, 0x7777L, -0x888888888L)))                                                 \
  /* x: one integer register left, so the stack; a6: that register; y: one SSE register   \
     left, so the stack; d8: that register; z: no register of either class, the stack */    \
  X(sspill, double,                                                                           \
    (long a1, long a2, long a3, long a4, long a5, abi_ll x, long a6, double d1, double d2,    \
     double d3, double d4, double d5, double d6, double d7, abi_dd y, double d8, abi_ld z),   \
    "i64,i64,i64,i64,i64,s16:ii,i64,f64,f64,f64,f64,f64,f64,f64,s16:ss,f64,s16:is -> f64",    \
    ABI_ARGS_SSPILL, ABI_ARGS_SSPILL)                                                         \
  X(mem, long, (int a, abi_m24 b, double c, abi_m40 d, long e), "i32,m24,f64,m40,i64 -> i64", \
    (-1, ABI_M24_A, 2.5, ABI_M40_A, -3L), (-1, ABI_M24_A, 2.5, ABI_M40_A, -3L))               \
  X(retmem, abi_m40, (long a, abi_m24 b, int c), "i64,m24,i32 -> m40",                        \
    (-0x123456789L, ABI_M24_B, 77), (-0x123456789L, ABI_M24_B, 77))                           \
  /* rdi carries the hidden return pointer: a6 goes on the stack */                          \
  X(retm24, abi_m24, (long a1, long a2, long a3, long a4, long a5, long a6),                  \
    "i64,i64,i64,i64,i64,i64 -> m24", (1L, -2L, 3L, -4L, 5L, -6L), (1L, -2L, 3L, -4L, 5L, -6L)) \
  X(ldbl, long double, (long double a, int b, long double c, double d), "f80,i32,f80,f64 -> f80", \
    (-1.25L, -2, 3.0e-4000L, 4.5), (-1.25L, -2, 3.0e-4000L, 4.5))                              \
  X(ret_i8, signed char, (signed char a, short b), "i8,i16 -> i8", ((signed char)-100, (short)-3), \
    ((signed char)-100, (short)-3))                                                           \
  X(ret_u16, unsigned short, (unsigned short a, bool b), "u16,u8 -> u16", (65000, true),       \
    (65000, true))                                                                            \
  X(vsum, long, (int n, ...), "i32,... -> i64", (10), ABI_ARGS_VSUM)                          \
  X(vdsum, double, (int n, ...), "i32,... -> f64", (11), ABI_ARGS_VDSUM)                      \
  X(vmix, long, (unsigned mask, int n, ...), "u32,i32,... -> i64", (0x2d2u, 14), ABI_ARGS_VMIX)

/* Functions returning nothing: they store their result in the build's sink, which their
 * driver reports. */
#define ABI_VOID_CASES(X)                                                                     \
  X(vset, void, (long v, double d, abi_ll s), "i64,f64,s16:ii -> void",                       \
    (-5L, 6.5, ABI_MK(abi_ll, 7L, -8L)), (-5L, 6.5, ABI_MK(abi_ll, 7L, -8L)))

/* One build's functions. drive/drive_rep call fn/rep with the row's arguments and copy
 * the result (the sink, for void functions) to `out`. */
struct abi_entry {
  const char *name;
  const char *signature;
  void *fn;
  void *rep;
  void (*drive)(void *out);
  void (*drive_rep)(void *out);
};

/* The noreturn function of a build: fn(code) calls _exit(code ^ 0x5a), rep(code) calls
 * _exit(code ^ 0x3c); drive/drive_rep call them with ABI_NORETURN_CODE. */
#define ABI_NORETURN_CODE 0x11
#define ABI_NORETURN_SIG "i32 -> void noreturn"

struct abi_build {
  const char *compiler; /* "gcc 12.2.0", "clang 14.0.6" */
  /* Passes __int128 as the psABI says: never split between the last integer register
   * and the stack, 16-byte aligned on the stack. clang before 18 does neither. */
  int i128_psabi;
  const struct abi_entry *cases; /* ABI_CASES then ABI_VOID_CASES, then a null name */
  struct abi_entry noreturn_fn;
};

#ifdef __cplusplus
}
#endif

#endif /* UTRAMP_TESTS_ABI_CASES_H */
