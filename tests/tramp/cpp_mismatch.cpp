// Must not compile: the program's parameters do not match the target's.
#include <utramp/utramp.hpp>

int target(int a, double b);

void attach_wrong() {
  auto l = utramp::fentry(&target, [](int a, const char* s) { (void)a; (void)s; });
}
