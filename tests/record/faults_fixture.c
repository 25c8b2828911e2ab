// A target for the recording's faults (faults_e2e_test.cpp). Each mode is one fault the
// recorder must survive; every traced call is counted by the test, so the functions
// below must stay calls (noinline, and a side effect the compiler cannot drop).
//
//   ready_wait READY GO   calls step() and work() 3 times, writes its pid to READY,
//                         waits (up to 30 s) for the file GO, calls them 3 more times
//                         (work() has the prototype examples/bpf/latency.bpf.c traces)
//   fill N                calls leaf() N times (fills a small file system)
//   orphan SECONDS        forks; the parent calls parent_work() and exits at once; the
//                         child sleeps SECONDS, then calls child_work() 5 times
//   spawn SECONDS         forks; the child waits 0.3 s, then execs `sleep SECONDS`
//                         (untraced: no --follow-exec) with its stdio on /dev/null;
//                         the parent calls
//                         parent_work() and exits at once
//   daemon MS             calls parent_work(), then daemon(3) (glibc's own fork: no
//                         fork event); the parent exits at once, the daemon sleeps MS
//                         milliseconds, then calls child_work() 5 times
//   posix_spawn MS        calls parent_work(), posix_spawn()s this program as
//                         `spawned MS` (no fork, no atfork handler: a vfork-like clone
//                         and exec), prints `child PID` and exits at once
//   spawned MS            sleeps MS milliseconds, then calls child_work() 5 times
//   scribble              3 threads call w_call(), the scribbler thread overwrites its own
//                         ring (control page and events) with 0xA5 and the rings' header
//                         with zeros, as a stray memset would, then everyone goes on
//                         calling; exits 3 when it cannot find its ring (the test must
//                         then fail, not pass on a target that scribbled nothing)
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile long g_sink;

__attribute__((noinline)) void step(int i) { g_sink += i; }
__attribute__((noinline)) int work(int n) {
  g_sink += n;
  return n % 5;
}
__attribute__((noinline)) void leaf(long i) { g_sink += i; }
__attribute__((noinline)) void parent_work(void) { g_sink += 1; }
__attribute__((noinline)) void child_work(int i) { g_sink += i; }
__attribute__((noinline)) void w_call(int i) { g_sink += i; }
__attribute__((noinline)) void scribbler_call(int i) { g_sink += i; }

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

// Writes TEXT to PATH whole (a temporary file renamed), so a poller never reads half.
static int write_whole(const char* path, const char* text) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE* f = fopen(tmp, "w");
  if (!f) return -1;
  fputs(text, f);
  if (fclose(f) != 0) return -1;
  return rename(tmp, path);
}

static int ready_wait(const char* ready, const char* go) {
  for (int i = 0; i < 3; ++i) step(work(i));
  char pid[32];
  snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  if (write_whole(ready, pid) != 0) return 4;
  for (int waited = 0; access(go, F_OK) != 0; waited += 10) {
    if (waited > 30000) return 5;
    sleep_ms(10);
  }
  for (int i = 3; i < 6; ++i) step(work(i));
  return 0;
}

static int daemonize(long ms) {
  parent_work();
  if (daemon(1, 1) != 0) return 4;
  sleep_ms(ms);
  for (int i = 0; i < 5; ++i) child_work(i);
  return 0;
}

extern char** environ;

static int spawn_self(const char* self, const char* ms) {
  parent_work();
  pid_t pid;
  char* args[] = {(char*)self, "spawned", (char*)ms, NULL};
  if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ) != 0) return 4;
  printf("child %d\n", (int)pid);
  return 0;
}

static int orphan(int seconds) {
  const pid_t child = fork();
  if (child < 0) return 4;
  if (child == 0) {
    sleep_ms(seconds * 1000L);
    for (int i = 0; i < 5; ++i) child_work(i);
    _exit(0);
  }
  parent_work();
  printf("child %d\n", (int)child);
  return 0;
}

// N children alive together (each waits for the last to be forked, then works), so
// that the recorder learns of N running processes at once.
static int forks(int n) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return 4;
  for (int i = 0; i < n; ++i) {
    const pid_t child = fork();
    if (child < 0) return 4;
    if (child == 0) {
      close(pipefd[1]);
      char c;
      while (read(pipefd[0], &c, 1) < 0) {}  // EOF once the parent closes the write end
      child_work(i);
      _exit(0);
    }
    sleep_ms(2);  // the recorder learns of each from its fork event while it waits
  }
  close(pipefd[1]);
  int failed = 0;
  for (int i = 0; i < n; ++i) {
    int st = 0;
    if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) ++failed;
  }
  return failed ? 6 : 0;
}

static int spawn(const char* seconds) {
  const pid_t child = fork();
  if (child < 0) return 4;
  if (child == 0) {
    // Late enough that the recorder has learnt of it (from the fork event) while it
    // still ran the traced program.
    struct timespec ts = {0, 300000000L};
    nanosleep(&ts, NULL);
    const int null = open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) dup2(null, fd);
    execl("/bin/sleep", "sleep", seconds, (char*)NULL);
    _exit(127);
  }
  parent_work();
  printf("child %d\n", (int)child);
  return 0;
}

// ---- scribble ----

enum { kWorkers = 3, kCalls = 20000 };
static pthread_barrier_t g_claimed, g_scribbled;

static void* worker(void* arg) {
  (void)arg;
  w_call(0);  // claims this thread's ring
  pthread_barrier_wait(&g_claimed);
  pthread_barrier_wait(&g_scribbled);
  for (int i = 1; i <= kCalls; ++i) w_call(i);
  return NULL;
}

// The ring file as the recorder lays it out (src/trace/shm_buffers.cpp): a 4 KiB header
// (max_buffers at 16, header_size at 24, buffer_stride at 32), then per thread a control
// page (state at 64, tid at 72; state 2 = active) and its ring. Read from the mapping,
// as a program that knew nothing of it would find it.
static int find_rings(char** base, size_t* size) {
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[4096];
  int found = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (!strstr(line, "utramp") || !strstr(line, "buffers")) continue;
    if (sscanf(line, "%lx-%lx", &lo, &hi) != 2) continue;
    *base = (char*)lo;
    *size = hi - lo;
    found = 0;
    break;
  }
  fclose(f);
  return found;
}

static void* scribbler(void* arg) {
  int* status = arg;
  scribbler_call(0);  // claims this thread's ring
  pthread_barrier_wait(&g_claimed);
  // Later in the thread's life, as a stray write would come: the recorder has seen the
  // ring claimed by then (it looks every millisecond), and knows whose it is.
  sleep_ms(200);
  char* base = NULL;
  size_t size = 0;
  *status = 3;
  if (find_rings(&base, &size) == 0 && size > 4096) {
    uint32_t max_buffers;
    uint64_t header_size, stride;
    memcpy(&max_buffers, base + 16, 4);
    memcpy(&header_size, base + 24, 8);
    memcpy(&stride, base + 32, 8);
    const uint32_t tid = (uint32_t)syscall(SYS_gettid);
    for (uint32_t i = 0; i < max_buffers && header_size + (i + 1) * stride <= size; ++i) {
      char* ctl = base + header_size + i * stride;
      uint32_t state, owner;
      memcpy(&state, ctl + 64, 4);
      memcpy(&owner, ctl + 72, 4);
      if (state != 2 || owner != tid) continue;
      memset(ctl, 0xA5, stride);  // its control page and its events
      memset(base, 0, 4096);      // the header: sizes, magic, the buffer allocator
      *status = 0;
      break;
    }
  }
  pthread_barrier_wait(&g_scribbled);
  for (int i = 1; i <= 100; ++i) scribbler_call(i);
  return NULL;
}

static int scribble(void) {
  pthread_barrier_init(&g_claimed, NULL, kWorkers + 1);
  pthread_barrier_init(&g_scribbled, NULL, kWorkers + 1);
  pthread_t t[kWorkers + 1];
  int status = 0;
  for (int i = 0; i < kWorkers; ++i) pthread_create(&t[i], NULL, worker, NULL);
  pthread_create(&t[kWorkers], NULL, scribbler, &status);
  for (int i = 0; i <= kWorkers; ++i) pthread_join(t[i], NULL);
  return status;
}

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "";
  step(-1);  // the main thread's ring, first
  if (!strcmp(what, "ready_wait") && argc > 3) return ready_wait(argv[2], argv[3]);
  if (!strcmp(what, "fill") && argc > 2) {
    const long n = atol(argv[2]);
    for (long i = 0; i < n; ++i) leaf(i);
    return 0;
  }
  if (!strcmp(what, "orphan") && argc > 2) return orphan(atoi(argv[2]));
  if (!strcmp(what, "spawn") && argc > 2) return spawn(argv[2]);
  if (!strcmp(what, "forks") && argc > 2) return forks(atoi(argv[2]));
  if (!strcmp(what, "scribble")) return scribble();
  if (!strcmp(what, "daemon") && argc > 2) return daemonize(atol(argv[2]));
  if (!strcmp(what, "posix_spawn") && argc > 2) return spawn_self(argv[0], argv[2]);
  if (!strcmp(what, "spawned") && argc > 2) {
    sleep_ms(atol(argv[2]));
    for (int i = 0; i < 5; ++i) child_work(i);
    return 0;
  }
  fprintf(stderr, "usage: %s ready_wait READY GO | fill N | orphan SECONDS | spawn SECONDS | forks N | scribble | daemon MS | posix_spawn MS\n", argv[0]);
  return 2;
}
