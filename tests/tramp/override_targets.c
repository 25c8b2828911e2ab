// Override points (UTRAMP_OVERRIDABLE) compiled by gcc and clang at -O2 with the prefix
// PFX (override_test.cpp links both builds). The callers are in the same file, where an
// optimiser that could see through the functions would fold their results: clang -O2
// computes `x` at the call site of a function that returns its argument, and keeps one
// call of a function it proves pure.
#include <utramp/utramp.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define NAME(n) CAT(PFX, n)
#define ALLOW(f) UTRAMP_ALLOW_ERROR_INJECTION(f)  // f expanded first

UTRAMP_OVERRIDABLE int NAME(echo)(int x) { return x; }
ALLOW(NAME(echo));

UTRAMP_OVERRIDABLE int NAME(is_big)(int x) { return x > 100 ? -1 : 0; }
ALLOW(NAME(is_big));

UTRAMP_OVERRIDABLE static int NAME(twice)(int x) { return 2 * x; }
int (*NAME(twice_ptr))(int) = NAME(twice);  // for the test to find it

// What callers see.
int NAME(call_echo)(int x) { return NAME(echo)(x + 1); }
int NAME(call_is_big_twice)(int x) { return NAME(is_big)(x) + NAME(is_big)(x); }
int NAME(call_twice)(int x) { return NAME(twice)(x) + 1; }
