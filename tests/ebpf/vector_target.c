// Vector arguments live across uprobes (run_e2e_test.cpp, VectorArgumentsSurviveUprobes):
// each function takes its arguments in xmm and ymm registers and is probed at its first
// instruction, where they are all live. The results are compared with the same
// arithmetic done in main (not probed); "vector_target: N calls, 0 wrong" when every
// call kept them. Built -O2, gcc, without frame pointers.
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>

#define KEEP __attribute__((noipa))

KEEP double weigh8(double a, double b, double c, double d, double e, double f, double g, double h) {
  return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h;
}

KEEP float weigh_f(float a, float b) { return a * 3.0f - b; }

// The upper halves of ymm0 and ymm1 are live at the entry.
__attribute__((target("avx"))) KEEP __m256d add4(__m256d a, __m256d b) { return _mm256_add_pd(a, b); }

__attribute__((target("avx"))) static int check_avx(int i) {
  volatile double x = i;
  const __m256d a = _mm256_set_pd(x + 4, x + 3, x + 2, x + 1), b = _mm256_set_pd(40, 30, 20, 10);
  double out[4];
  _mm256_storeu_pd(out, add4(a, b));
  return out[0] != x + 11 || out[1] != x + 22 || out[2] != x + 33 || out[3] != x + 44;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 1000;
  const int avx = __builtin_cpu_supports("avx");
  int wrong = 0;
  for (int i = 0; i < n; ++i) {
    volatile double x = i * 0.5;
    const double want = x + 2 * (x + 1) + 3 * (x + 2) + 4 * (x + 3) + 5 * (x + 4) + 6 * (x + 5) + 7 * (x + 6) +
                        8 * (x + 7);
    wrong += weigh8(x, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7) != want;
    volatile float y = (float)i;
    wrong += weigh_f(y, y + 0.5f) != y * 3.0f - (y + 0.5f);
    if (avx) wrong += check_avx(i);
  }
  printf("vector_target: %d calls, %d wrong%s\n", n, wrong, avx ? "" : " (no AVX: add4 not called)");
  return wrong != 0;
}
