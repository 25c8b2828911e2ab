#include "dwarf_fixture_xtu.hpp"

xtu::Homed::Homed(int x) : a(x), b(x) {}
