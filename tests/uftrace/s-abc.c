// uftrace-style test program: a plain call chain (uftrace's s-abc.c shape).
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

NOINLINE int c(void) { return (int)getpid() % 100000; }
NOINLINE int b(void) { return c() + 1; }
NOINLINE int a(void) { return b() - 1; }

int main(void) { return a() < 0; }
