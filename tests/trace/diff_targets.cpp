// Traced functions for the tracer's differential test (tracer_diff_test.cpp): nested
// calls and leaves, recursion to any depth, a longjmp and an exception out of nested
// traced frames. Built with compiler patch sites; `keep` stops the compiler from
// turning a call into a jump or a recursion into a loop, so each call has its frame.
#include <csetjmp>
#include <stdexcept>

#define TD_FUNC extern "C" __attribute__((noinline, used))

static inline int keep(int x) {
  asm volatile("" : "+r"(x));
  return x;
}

TD_FUNC int td_leaf(int x) { return keep(x) + 1; }
TD_FUNC int td_mid(int x) { return keep(td_leaf(x) + td_leaf(x + 1)) + 1; }
TD_FUNC int td_top(int x) { return keep(td_mid(x) + td_leaf(x)) + 1; }
TD_FUNC int td_deep(int n) { return n == 0 ? keep(td_leaf(0)) : keep(td_deep(n - 1)) + 1; }

TD_FUNC void td_jump(std::jmp_buf* env, int n) {
  if (n == 0) std::longjmp(*env, 1);
  td_jump(env, n - 1);
  keep(n);
}

TD_FUNC int td_throw(int n) {
  if (n == 0) throw std::runtime_error("td_throw");
  return keep(td_throw(n - 1)) + 1;
}
