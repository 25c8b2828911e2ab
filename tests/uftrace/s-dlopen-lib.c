// The library of s-dlopen.c: a call chain of its own. Each function stores to a
// volatile: a compiler that sees a function has no effect drops the call even when it
// may not inline it (clang -O2 did, for lib_c).
#define NOINLINE __attribute__((noinline))

static volatile int sink;

NOINLINE int lib_c(int n) {
  sink = n;
  return n;
}
NOINLINE int lib_b(int n) {
  sink = n;
  return lib_c(n) + 1;
}
NOINLINE int lib_a(int n) {
  sink = n;
  return lib_b(n) + 2;
}
