// Signatures for dwarf_test.cpp, which holds each function's expected describe() string.
// Built by gcc and clang at -O0 and -O2 (see dwarf.cmake). The f_* functions are
// external and noinline, so -O2 keeps their ABI; the local_* ones exist to be refused
// once the optimiser has changed their calling convention.
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#define API __attribute__((noinline, visibility("default")))

enum color { RED, GREEN = 1000 };
typedef struct { int a; } S4;
struct S8 { int a, b; };
struct S12 { int a, b, c; };
struct S16 { long a; double b; };
struct SD { double a, b; };
struct SF2 { float a, b; };
struct SF3 { float a, b, c; };
struct SFI { float a; int b; };           // SSE and INTEGER share an eightbyte: INTEGER
struct Big { long a[3]; };
struct Mix { char c; double d; };
struct CharArr { char c[16]; };
struct FloatArr { float f[4]; };
struct Nested { struct { float x; } in; float y; int z; };
union UDL { double d; long l; };
union UFD { float f[2]; double d; };
struct Bits { unsigned a : 3; unsigned b : 30; unsigned c : 20; float f; };  // b, c start new units
struct Bits2 { float f; unsigned a : 4; };
struct __attribute__((packed)) Packed { char c; int i; };  // i unaligned: MEMORY
struct __attribute__((packed)) PackedOk { int a; int b; };
struct LD { long double x; };
struct Empty {};                          // GNU C: size 0
struct Al16 { _Alignas(16) long x; };     // second eightbyte has no class
struct CF { _Complex float z; };
struct Big17 { char c[17]; };
typedef const volatile struct S8 CVS8;
struct Flex { int n; int data[]; };
struct I128 { __int128 v; };
struct LDU { union { long double x; int i; } u; };  // X87UP not preceded by X87: MEMORY
struct FP { int (*fn)(int); };
struct ArrNest { struct SF2 p[2]; };
typedef float v4sf __attribute__((vector_size(16)));

volatile long sink;

API int8_t f_i8(int8_t a) { return a; }
API uint16_t f_u16(uint16_t a, bool b, char c) { return a + b + c; }
API long f_scalars(int a, long b, unsigned long long c, void* p, const char* s, enum color e) {
  return a + b + (long)c + (long)p + (long)s + e;
}
API double f_fp(float a, double b) { return a + b; }
API float f_retf(void) { return 1.5f; }
API long double f_ld(long double a, int b) { return a + b; }
API __int128 f_i128(__int128 a, unsigned __int128 b) { return a + (__int128)b; }
API _Complex float f_cf(_Complex float a) { return a * 2; }
API _Complex double f_cd(_Complex double a) { return a * 2; }
API int f_cld(_Complex long double a) { return (int)__real__ a; }
API void f_structs(S4 a, struct S8 b, struct S12 c, struct S16 d, struct SD e, struct SF2 f) {
  sink = a.a + b.a + c.c + d.a + (long)e.b + (long)f.b;
}
API struct Big f_big(struct Big a, struct SF3 b, struct SFI c) {
  a.a[0] += (long)b.c + c.b;
  return a;
}
API struct Mix f_mix(struct Mix a, struct CharArr b, struct FloatArr c, struct Nested d) {
  a.d += b.c[3] + c.f[2] + d.z;
  return a;
}
API union UDL f_unions(union UDL a, union UFD b) {
  a.d += b.d;
  return a;
}
API struct Bits f_bits(struct Bits a, struct Bits2 b) {
  a.c += b.a;
  return a;
}
API int f_packed(struct Packed a, struct PackedOk b) { return a.i + b.b; }
API struct LD f_ldstruct(struct LD a) {
  a.x *= 2;
  return a;
}
API int f_empty(struct Empty e, int a) {
  (void)e;
  return a;
}
API struct Al16 f_al16(struct Al16 a, struct CF b, struct Big17 c) {
  a.x += (long)__real__ b.z + c.c[16];
  return a;
}
API int f_cv(CVS8 a, const int b, volatile double c) { return a.a + b + (int)c; }
API int f_flex(struct Flex a) { return a.n; }
API struct I128 f_i128s(struct I128 a) { return a; }
API struct LDU f_ldu(struct LDU a) { return a; }
API struct FP f_fnptr(struct FP a, int (*g)(int)) {
  if (g) a.fn = g;
  return a;
}
API struct ArrNest f_arrnest(struct ArrNest a) { return a; }
API int f_many(int a, int b, int c, int d, int e, int f, int g, double h, struct S16 i, long double j) {
  return a + b + c + d + e + f + g + (int)h + (int)i.a + (int)j;
}
API int f_variadic(int n, ...) { return n; }
API _Noreturn void f_noreturn(int code) { exit(code); }
API int f_knr(a, f) char a; float f; { return a + (int)f; }
API void f_void(void) { sink = 1; }

// Refused: no ctx form for these.
API int f_vector(int a, v4sf v) { return a + (int)v[0]; }
API _Complex long double f_cld_ret(void) { return 1; }
API int f_f128(__float128 x) { return (int)x; }

// Local functions the optimiser may give a calling convention of its own: gcc clones
// them (local_dropped.isra.0, local_const.constprop.0), clang drops the arguments in
// place (DW_AT_const_value, or a parameter in the "wrong" register).
__attribute__((noinline)) static int local_dropped(int a, int unused, long* b) { return a + (int)*b; }
__attribute__((noinline)) static int local_const(int a, int k) { return a * k + 1; }
API int f_uses_locals(int x) {
  long b = x;
  return local_dropped(x, 5, &b) + local_const(x, 3) + local_const(x + 1, 3);
}

// Inlined into f_inl_user and also out of line (its address escapes): at -O2 the
// out-of-line copy is a concrete instance (DW_AT_abstract_origin).
static int inl_twice(int a, double b) { return a * 2 + (int)b; }
API int (*f_inl_ptr(void))(int, double) { return inl_twice; }
API int f_inl_user(int x) { return inl_twice(x, 1.5); }

// gcc leaves a transparent union's members out of DWARF; the argument is passed as its
// first member (a pointer here), which only the entry location can then tell.
struct sa { int x; };
struct sb { long y; };
typedef union { const struct sa* a; const struct sb* b; } sockish __attribute__((__transparent_union__));
API int f_transparent(int fd, sockish p, int len) { return fd + len + (p.a != 0); }
