// A call chain for arch_unwind_test.cpp, built with -O2 and frame pointers.
#define CHAIN(name) chain_fp_##name
#include "arch_unwind_chain.inc"
