// uftrace-style test program: a library opened with dlopen (uftrace's s-dlopen.c
// shape). The library (s-dlopen-lib.c, built the same way as the program) is found
// next to the program through $ORIGIN; its functions are called through dlsym.
#include <dlfcn.h>
#include <stdio.h>

#define NOINLINE __attribute__((noinline))

NOINLINE int call_lib(void* handle, const char* name, int n) {
  int (*fn)(int) = (int (*)(int))dlsym(handle, name);
  return fn ? fn(n) : -1;
}

int main(int argc, char** argv) {
  (void)argc;
  char path[4096];
  // Next to the program: its own name with ".so" appended.
  snprintf(path, sizeof path, "%s.so", argv[0]);
  void* handle = dlopen(path, RTLD_NOW);
  if (!handle) return 2;
  int r = call_lib(handle, "lib_a", 3);
  dlclose(handle);
  return r == 6 ? 0 : 1;
}
