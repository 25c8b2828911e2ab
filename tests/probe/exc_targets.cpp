// C++ targets of the return-probe tests: exceptions leaving probed frames.
#include <stdexcept>

#define NOINLINE __attribute__((noinline, noclone, used))

extern "C" {

// Throws when x is negative.
NOINLINE int pt_throw(int x) {
  if (x < 0) throw std::runtime_error("negative");
  return x * 2;
}

// One frame more: the exception leaves two hijacked frames when both are probed.
NOINLINE int pt_throw_outer(int x) {
  volatile int keep = x;
  return pt_throw(keep) + 1;
}

// Catches inside: the exception never reaches the trampoline.
NOINLINE int pt_catch_inside(int x) {
  try {
    return pt_throw(x);
  } catch (const std::runtime_error&) {
    return -1;
  }
}

// A destructor in the hijacked frame runs during the unwind.
struct PtGuard {
  int* counter;
  ~PtGuard() { ++*counter; }
};
NOINLINE int pt_throw_with_guard(int x, int* destroyed) {
  PtGuard g{destroyed};
  volatile int keep = x;
  return pt_throw(keep) + 5;
}

}  // extern "C"
