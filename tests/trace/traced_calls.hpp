// For the tests that trace calls in their own process: a call the compiler must make as
// written, and the traced functions of diff_targets.cpp (built with patch sites).
#pragma once

#include <csetjmp>

extern "C" {
int td_leaf(int);
int td_mid(int);
int td_top(int);
int td_deep(int);
void td_jump(std::jmp_buf*, int);
int td_throw(int);
}

namespace utramp::test {

template <class F>
auto call(F* f, auto... args) {
  F* volatile p = f;  // the compiler must not inline or fold the call
  return p(args...);
}

}  // namespace utramp::test
