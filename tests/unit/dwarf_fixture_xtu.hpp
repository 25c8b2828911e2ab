// A class defined in one translation unit and passed by value in another: clang
// describes it only where its constructor is emitted (constructor homing), so the
// unit that uses it holds a declaration and the definition is found in the other.
#pragma once

namespace xtu {
struct Homed {
  explicit Homed(int x);
  int a;
  double b;
};
}  // namespace xtu
