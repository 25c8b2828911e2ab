// The C program `utramp record` traces in the end-to-end tests, built with gcc and
// clang, -O0 and -O2, in each site flavour (tests/record/CMakeLists.txt). argv[1] picks a
// scenario; each one has a fixed call tree, the same in every build:
//
//   - every traced function is kept out of line and un-cloned (FX), and stores to a
//     volatile before returning, so -O2 neither inlines it, nor turns its recursion into
//     a loop, nor makes its calls tail jumps;
//   - every function body is long enough for a relocated prologue (the `plain` builds
//     have no compiler site): a volatile store is the first instruction.
//
// Scenarios: basic (nesting, recursion, exact counts), args (argument and return-value
// capture), fargs (floating-point, narrow and signed values), deep N (recursion N deep), slow (for -t), threads, fork, fork_exit (the child calls exit(5)), longjmp,
// crash (SIGSEGV), many N (N leaf calls, for buffer overflow), io (stdin to stdout, a
// line to stderr, exit 3), names (C functions whose names are manglings of types).
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__clang__)
#define FX __attribute__((noinline, used))
#else
#define FX __attribute__((noipa, used))
#endif

volatile long sink;

// A function too short for any kind of site (3 bytes, no compiler site): never traced,
// listed as skipped, with the reason, in the agent's log.
__asm__(".text\n.globl tiny_asm\n.type tiny_asm,@function\ntiny_asm:\n"
        "  xorl %eax, %eax\n  ret\n.size tiny_asm, .-tiny_asm\n");

FX int leaf(int x) {
  sink = x;
  return x + 1;
}

FX int fib(int n) {
  sink = n;
  if (n < 2) return n;
  const int r = fib(n - 1) + fib(n - 2);
  sink = r;
  return r;
}

FX void nest_c(void) {
  sink = 3;
  leaf(3);
  sink = 3;
}

FX void nest_b(void) {
  sink = 2;
  nest_c();
  sink = 2;
}

FX void nest_a(void) {
  sink = 1;
  nest_b();
  sink = 1;
}

FX int run_basic(void) {
  sink = 0;
  for (int i = 0; i < 3; ++i) leaf(i);
  const int f = fib(6);  // 25 calls of fib
  nest_a();
  sink = f;
  return f;
}

// -A add@arg1,arg2 -R add; -A greet@arg1/s -R greet/s; -A pick@arg1/x -R pick/x
FX long add(long a, long b) {
  sink = a;
  return a + b;
}

FX const char* greet(const char* who) {
  sink = (long)who[0];
  return strcmp(who, "world") == 0 ? "hello, world" : "who?";
}

FX void* pick(void* p) {
  sink = 0;
  return p;
}

FX int run_args(void) {
  sink = 0;
  long s = add(40, 2);
  s += add(-7, 3);
  greet("world");
  greet("a string longer than sixteen bytes");
  pick(NULL);
  sink = s;
  return s == 38 ? 0 : 1;
}

// -t: slow() takes 20 ms, everything else microseconds at most.
FX void slow(void) {
  sink = 9;
  struct timespec ts = {0, 20 * 1000 * 1000};
  while (nanosleep(&ts, &ts) != 0) {
  }
  sink = 9;
}

FX int run_slow(void) {
  sink = 0;
  leaf(1);
  slow();
  leaf(2);
  sink = 0;
  return 0;
}

// Threads: worker k calls leaf() 10*k times.
FX void* worker(void* arg) {
  const int k = (int)(long)arg;
  sink = k;
  for (int i = 0; i < 10 * k; ++i) leaf(i);
  sink = k;
  return NULL;
}

FX int run_threads(void) {
  sink = 0;
  pthread_t t[3];
  for (long k = 1; k <= 3; ++k) pthread_create(&t[k - 1], NULL, worker, (void*)k);
  for (int k = 0; k < 3; ++k) pthread_join(t[k], NULL);
  leaf(0);
  sink = 0;
  return 0;
}

FX void child_work(void) {
  sink = 5;
  leaf(5);
  leaf(6);
  sink = 5;
}

FX void parent_work(void) {
  sink = 6;
  leaf(7);
  sink = 6;
}

// The child ends by _exit(0), which the agent does not see, or with `by_exit` by
// exit(5), which it does: its process file then says how it ended. Returns 0 when the
// child ended as it should.
FX int run_fork(int by_exit) {
  sink = 0;
  leaf(1);
  fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    child_work();
    if (by_exit) exit(5);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  parent_work();
  sink = 0;
  return WIFEXITED(st) && WEXITSTATUS(st) == (by_exit ? 5 : 0) ? 0 : 99;
}

// C functions named as the Itanium ABI mangles builtin types ("a" signed char, "b" bool,
// "c" char, "d" double, "f" float, "i" int), and one that starts like a mangled name
// without being one: their names are shown as they are, never demangled.
#define NAMED_LIKE_A_TYPE(name) \
  FX int name(int x) {          \
    sink = x;                   \
    return x + 1;               \
  }
NAMED_LIKE_A_TYPE(a)
NAMED_LIKE_A_TYPE(b)
NAMED_LIKE_A_TYPE(c)
NAMED_LIKE_A_TYPE(d)
NAMED_LIKE_A_TYPE(f)
NAMED_LIKE_A_TYPE(i)
NAMED_LIKE_A_TYPE(_Zap)

FX int run_names(void) {
  sink = 0;
  const int r = _Zap(i(f(d(c(b(a(0)))))));
  sink = 0;
  return r == 7 ? 0 : 1;
}

static jmp_buf jb;

FX void jump_deep(void) {
  sink = 2;
  longjmp(jb, 1);
}

FX void jump_mid(void) {
  sink = 1;
  jump_deep();
  sink = 1;
}

FX int jumper(void) {
  sink = 0;
  if (setjmp(jb) == 0) {
    jump_mid();
    return 0;
  }
  sink = 0;
  return 1;
}

FX int run_longjmp(void) {
  sink = 0;
  const int r = jumper();
  leaf(r);
  sink = 0;
  return 0;
}

FX void crash_inner(int* p) {
  sink = 1;
  *p = 42;  // p is NULL: SIGSEGV
  sink = 1;
}

FX void crash_outer(void) {
  sink = 1;
  leaf(1);
  crash_inner((int*)(long)(sink - 1));
  sink = 1;
}

FX int run_many(long n) {
  sink = 0;
  for (long i = 0; i < n; ++i) leaf((int)i);
  sink = 0;
  return 0;
}

FX int run_io(void) {
  sink = 0;
  char buf[256];
  size_t total = 0;
  while (fgets(buf, sizeof buf, stdin)) {
    total += strlen(buf);
    fputs(buf, stdout);
  }
  fprintf(stderr, "read %zu bytes\n", total);
  return 3;
}

// fargs: values whose C type matters (-A/-R formats, floating-point registers). Each
// function also takes values in the other register class, so that argN and fpargN
// count apart: scale's x is fparg1 and its n arg1.
FX double scale(double x, int n) {
  sink = n;
  return x * n;
}

FX float half(float x) {
  sink = 0;
  return x / 2;
}

FX int neg(int a, short b) {
  sink = a;
  return a + b;
}

FX char upper(char c) {
  sink = c;
  return (char)(c - 'a' + 'A');
}

FX unsigned long mixed(int a, double b, const char* s, float c) {
  sink = a + (long)b + (long)c + s[0];
  return 0xfffffffffffffffful;
}

// deep N: a recursion N calls deep (past the tracer's depth limit).
FX long dive(long n) {
  sink = n;
  const long r = n > 1 ? dive(n - 1) + 1 : 1;
  sink = r;
  return r;
}

FX int run_fargs(void) {
  sink = 0;
  const double d = scale(1.5, 3);
  const float f = half(5.0f);
  const int n = neg(-1, -2);
  const char u = upper('q');
  const unsigned long m = mixed(-5, 0.25, "str", -2.5f);
  sink = 0;
  return d == 4.5 && f == 2.5f && n == -3 && u == 'Q' && m == ~0ul ? 0 : 1;
}

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "basic";
  if (!strcmp(what, "basic")) return run_basic() == 8 ? 0 : 1;
  if (!strcmp(what, "args")) return run_args();
  if (!strcmp(what, "fargs")) return run_fargs();
  if (!strcmp(what, "deep")) return dive(argc > 2 ? atol(argv[2]) : 10) == (argc > 2 ? atol(argv[2]) : 10) ? 0 : 1;
  if (!strcmp(what, "slow")) return run_slow();
  if (!strcmp(what, "threads")) return run_threads();
  if (!strcmp(what, "fork")) return run_fork(0);
  if (!strcmp(what, "fork_exit")) return run_fork(1);
  if (!strcmp(what, "names")) return run_names();
  if (!strcmp(what, "longjmp")) return run_longjmp();
  if (!strcmp(what, "crash")) {
    crash_outer();
    return 0;
  }
  if (!strcmp(what, "many")) return run_many(argc > 2 ? atol(argv[2]) : 1000);
  if (!strcmp(what, "io")) return run_io();
  fprintf(stderr, "unknown scenario %s\n", what);
  return 2;
}
