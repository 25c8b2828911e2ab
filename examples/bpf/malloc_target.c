// The target of malloc_count.bpf.c and memleak.bpf.c: THREADS threads each call malloc
// COUNT times for kTracedSize bytes, through counted_malloc (which counts them), freeing
// each block; then, with a library path, it dlopens it and calls its plugin_work,
// dlcloses it and does it once more. It prints its own counts.
//
//   malloc_target THREADS COUNT [LIBRARY CALLS]
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

enum { kTracedSize = 4093 };  // malloc_count.bpf.c: TRACED_SIZE

static atomic_ulong g_calls;
static long g_count;

__attribute__((noinline)) void* counted_malloc(size_t size) {
  atomic_fetch_add(&g_calls, 1);
  return malloc(size);
}

static void* worker(void* arg) {
  (void)arg;
  for (long i = 0; i < g_count; ++i) {
    char* volatile p = counted_malloc(kTracedSize);
    if (!p) abort();
    p[0] = (char)i;
    free(p);
  }
  return NULL;
}

// Loads LIBRARY, calls its plugin_work(1..CALLS), unloads it: the sum it returned.
static long with_plugin(const char* lib, int calls) {
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "malloc_target: %s\n", dlerror());
    exit(1);
  }
  long (*work)(long) = (long (*)(long))dlsym(h, "plugin_work");
  if (!work) exit(1);
  long sum = 0;
  for (int i = 1; i <= calls; ++i) sum += work(i);
  dlclose(h);
  return sum;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: malloc_target THREADS COUNT [LIBRARY CALLS]\n");
    return 2;
  }
  const int threads = atoi(argv[1]);
  g_count = atol(argv[2]);
  pthread_t t[64];
  if (threads < 1 || threads > 64) return 2;
  for (int i = 0; i < threads; ++i)
    if (pthread_create(&t[i], NULL, worker, NULL) != 0) return 1;
  for (int i = 0; i < threads; ++i) pthread_join(t[i], NULL);
  printf("malloc_target: %lu mallocs of %d bytes\n", atomic_load(&g_calls), kTracedSize);
  if (argc >= 5) {
    const int calls = atoi(argv[4]);
    const long a = with_plugin(argv[3], calls);
    const long b = with_plugin(argv[3], calls);
    printf("malloc_target: plugin_work %d calls twice: %ld %ld\n", calls, a, b);
  }
  return 0;
}
