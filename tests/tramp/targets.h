// The targets in targets.c (compiler patch sites).
#pragma once

#include <cstdint>

extern "C" {
int64_t tt_add(int64_t, int64_t);
double tt_mix(int, double, float, long);
int tt_many(int, int, int, int, int, int, int, int);
int tt_check(int);  // error-injectable
int tt_unmarked(int);
int tt_replace_me(int);
int tt_replacement(int);
double tt_mix2(int, double, float, long);
}
