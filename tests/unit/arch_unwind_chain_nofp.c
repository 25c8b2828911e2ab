// A call chain for arch_unwind_test.cpp, built with -O2 and -fomit-frame-pointer.
#define CHAIN(name) chain_nofp_##name
#include "arch_unwind_chain.inc"
