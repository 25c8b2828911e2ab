// A target that abuses the eBPF maps `utramp run` shares with it (run_e2e_test.cpp); the
// CLI must end in bounded time, reading what is left, without crashing.
//   map_abuse kill MS      four threads call work() without pause; after MS ms the
//                          process SIGKILLs itself, likely while a thread holds a
//                          map's bucket lock (taken by the programs on work)
//   map_abuse scribble     calls work() a little, then fills every mapping of a utramp
//                          map file with 0xff (a stray memset) and exits 0
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) int work(int n) {
  sink += (unsigned long)n;
  return n % 5;
}

static void* hammer(void* arg) {
  (void)arg;
  for (int i = 0;; ++i) work(i);
  return NULL;
}

static void scribble(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[4096];
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[1] != 'w') continue;
    const char* path = strchr(line, '/');
    if (!path || !strstr(path, "utramp-run-")) continue;
    memset((void*)lo, 0xff, hi - lo);
  }
  if (f) fclose(f);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  if (strcmp(argv[1], "kill") == 0) {
    pthread_t t;
    for (int i = 0; i < 4; ++i) pthread_create(&t, NULL, hammer, NULL);
    const long ms = argc > 2 ? atol(argv[2]) : 100;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
    kill(getpid(), SIGKILL);
  } else if (strcmp(argv[1], "scribble") == 0) {
    for (int i = 0; i < 1000; ++i) work(i);
    scribble();
    puts("scribbled");
  }
  return 0;
}
