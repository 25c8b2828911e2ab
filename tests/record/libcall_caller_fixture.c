// Library functions that look at their caller's address, for
// tests/record/libcall_e2e_test.cpp: dlopen expands $ORIGIN to the caller's directory
// (the loader finds the caller by its return address), and dlsym's RTLD_NEXT searches
// after the caller's object. Traced, the loader must still take these calls for the
// program's own: libcall_dep.so is found next to the program, not next to utramp.
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

__attribute__((noinline)) int open_dep(void) {
  void* h = dlopen("$ORIGIN/libcall_dep.so", RTLD_NOW);
  if (!h) {
    printf("dlopen: %s\n", dlerror());
    return -1;
  }
  int (*twice)(int) = (int (*)(int))dlsym(h, "dep_twice");
  const int r = twice ? twice(21) : -1;
  dlclose(h);
  return r;
}

__attribute__((noinline)) int next_getpid(void) {
  pid_t (*next)(void) = (pid_t (*)(void))dlsym(RTLD_NEXT, "getpid");
  return next && next() == getpid();
}

int main(void) {
  const int dep = open_dep();
  const int next = next_getpid();
  printf("dep %d, next %d\n", dep, next);
  return dep == 42 && next ? 0 : 1;
}
