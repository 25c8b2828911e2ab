/* 3000 small functions with compiler patch sites, and a table of them
 * (tramp_many_test.cpp): more traced functions than a process has thread counter
 * slots (tramp/threads.hpp), as a tracer of every function of a large program or of
 * its libraries needs. */
#define MF(n) \
  __attribute__((noinline)) long mf_##n(long x) { __asm__ volatile("" ::: "memory"); return x + n; }
#define MF10(p) MF(p##0) MF(p##1) MF(p##2) MF(p##3) MF(p##4) MF(p##5) MF(p##6) MF(p##7) MF(p##8) MF(p##9)
#define MF100(p) MF10(p##0) MF10(p##1) MF10(p##2) MF10(p##3) MF10(p##4) \
                 MF10(p##5) MF10(p##6) MF10(p##7) MF10(p##8) MF10(p##9)
#define MF1000(p) MF100(p##0) MF100(p##1) MF100(p##2) MF100(p##3) MF100(p##4) \
                  MF100(p##5) MF100(p##6) MF100(p##7) MF100(p##8) MF100(p##9)
MF1000(1)
MF1000(2)
MF1000(3)

#define MT(n) mf_##n,
#define MT10(p) MT(p##0) MT(p##1) MT(p##2) MT(p##3) MT(p##4) MT(p##5) MT(p##6) MT(p##7) MT(p##8) MT(p##9)
#define MT100(p) MT10(p##0) MT10(p##1) MT10(p##2) MT10(p##3) MT10(p##4) \
                 MT10(p##5) MT10(p##6) MT10(p##7) MT10(p##8) MT10(p##9)
#define MT1000(p) MT100(p##0) MT100(p##1) MT100(p##2) MT100(p##3) MT100(p##4) \
                  MT100(p##5) MT100(p##6) MT100(p##7) MT100(p##8) MT100(p##9)
long (*const mf_table[3000])(long) = {MT1000(1) MT1000(2) MT1000(3)};
