#include "dwarf_fixture_xtu.hpp"

__attribute__((noinline, visibility("default"))) int use_homed(xtu::Homed h) {
  return h.a + static_cast<int>(h.b);
}
