// A plugin (built twice, as libld_plug.so and libld_plug2.so with LD_VARIANT 2). Its
// RUNPATH is $ORIGIN/deps, and it loads its own dependency by bare name.
#include <dlfcn.h>

#ifndef LD_VARIANT
#define LD_VARIANT 1
#endif

__attribute__((noinline)) int ld_plug_leaf(int x) { return x * LD_VARIANT + 1; }

int ld_plug_work(int n) {
  void* h = dlopen("libld_dep.so", RTLD_NOW);  // found through this library's RUNPATH
  int (*dep)(void) = h ? (int (*)(void))dlsym(h, "ld_dep_value") : 0;
  int sum = dep ? dep() : -1000;
  for (int i = 0; i < n; ++i) sum += ld_plug_leaf(i);
  if (h) dlclose(h);
  return sum;
}
