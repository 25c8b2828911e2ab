// A plugin host, for the loader tests (loader_e2e_test.cpp): its RUNPATH is
// $ORIGIN/plugins, and it loads plugins by bare name — from a constructor and from main,
// while a second thread runs — unloads one and loads another, as hosts do. Its output
// must be the same under `utramp record` as without.
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

static atomic_int stop;
static void* spin(void* arg) {
  (void)arg;
  while (!atomic_load(&stop)) {
  }
  return NULL;
}

static int (*ctor_value)(int);

__attribute__((constructor)) static void load_early(void) {
  void* h = dlopen("libld_ctor.so", RTLD_NOW);  // found through this program's RUNPATH
  if (!h) {
    printf("constructor: dlopen failed: %s\n", dlerror());
    return;
  }
  ctor_value = (int (*)(int))dlsym(h, "ld_ctor_value");
}

int main(void) {
  pthread_t t;
  pthread_create(&t, NULL, spin, NULL);  // from here on the process is multi-threaded
  printf("constructor plugin: %d\n", ctor_value ? ctor_value(3) : -1);
  static const char* const names[] = {"libld_plug.so", "libld_plug2.so", "libld_plug.so"};
  for (int round = 0; round < 3; ++round) {
    void* h = dlopen(names[round], RTLD_NOW);
    if (!h) {
      printf("%s: dlopen failed: %s\n", names[round], dlerror());
      continue;
    }
    int (*work)(int) = (int (*)(int))dlsym(h, "ld_plug_work");
    printf("%s: %d\n", names[round], work ? work(10) : -1);
    dlclose(h);
  }
  atomic_store(&stop, 1);
  pthread_join(t, NULL);
  return 0;
}
