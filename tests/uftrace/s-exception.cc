// uftrace-style test program: a C++ exception thrown two calls down and caught in
// main (uftrace's s-exp-cxx shape): the frames it unwinds end at the throw, and the
// calls after the catch nest under main again.
#include <stdexcept>

#define NOINLINE __attribute__((noinline))

static volatile int sink;

NOINLINE void thrower(int n) {
  if (n > 0) throw std::runtime_error("uftrace-style");
  sink = n;
}
NOINLINE void middle(int n) {
  thrower(n);
  sink += 1;
}
NOINLINE void after(void) { sink += 2; }

int main() {
  try {
    middle(1);
  } catch (const std::exception&) {
    after();
  }
  middle(0);
  return sink == 1 ? 0 : 1;
}
