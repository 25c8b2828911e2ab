// C++ targets that throw, built with compiler patch sites (tramp_behaviour_test.cpp).
#include <stdexcept>

#include "behaviour_targets.h"

// Throws a TbError carrying x when x is negative.
extern "C" __attribute__((noinline, used)) int tb_throw(int x) {
  if (x < 0) throw TbError{x};
  return x * 2;
}

// Throws from a callee one frame further down (the unwinder crosses two frames of code
// compiled ahead of time before reaching the image).
__attribute__((noinline)) static int tb_throw_leaf(int x) {
  if (x < 0) throw std::invalid_argument("negative");
  return x + 1;
}
extern "C" __attribute__((noinline, used)) int tb_throw_deep(int x) {
  return tb_throw_leaf(x) * 3;
}
