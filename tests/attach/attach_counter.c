// A long-running process to record while it runs (`utramp record -p`, record_pid_test):
// WORKERS threads call count_a() and count_b() in a loop and count their own calls, one
// thread is blocked in read() on stdin (the main one), one sits in a SIGUSR1 handler
// until the end. It prints "ready PID" once all run, then obeys one-letter commands on
// stdin:
//   p  pause: every worker waits outside the counted functions; prints
//      "counts A B" (the calls of count_a and count_b made so far, all threads)
//   r  resume; prints "resumed"
//   q  (or the end of stdin) stop; prints "ok: N workers" or "BAD: ..." when a
//      result was wrong
//   x  exec /bin/sleep 1 (an exec while it is recorded)
//   t  install its own SIGTRAP handler (counting); prints "trap handler set"
//   T  raise(SIGTRAP); prints "trap handler own|not own, N traps": whether the handler
//      installed now is its own, and how many traps its own handler got
//   s  raise(SIGUSR2), whose handler (installed with every signal in its mask) calls
//      no_site(); prints "usr2 handled, mask with|without SIGTRAP" (its mask now)
//   g  prints what sigaction(SIGTRAP, NULL, &old) shows: "trap action own|default|
//      ignore|other, flags[ siginfo][ resethand], mask with|without SIGUSR2"
//   h  install its own SIGTRAP handler once (SA_RESETHAND, SIGUSR2 in its mask):
//      prints "trap handler set once"
//   i  execute an int3 of its own; prints "int3: N traps, usr2 blocked|unblocked in the
//      handler" (the handler saw SIGUSR2 blocked while it ran, as its mask says)
//   f  fork a child that calls no_site() and count_a(), prints what it sees of SIGTRAP's
//      action and SIGUSR2's mask, then waits for 'F'; prints "forked PID: LINE" (the
//      child's line)
//   F  end the child: prints "child exit N"
//   b  block SIGTRAP (pthread_sigmask), call no_site(), read the mask back, unblock it
//      (sigprocmask); prints "blocked: no_site N, mask with|without SIGTRAP"
//   u  prints "ticks T, semaphore S": how many times the workers passed the USDT probe
//      attach_counter:tick (each iteration, only while its semaphore S is raised: a
//      tracer attached), and the semaphore now
// With a second argument "block-trap", one more thread keeps SIGTRAP blocked until the
// end (it never calls the counted functions); "block-all", every worker blocks every
// signal while it runs, as liblzma's workers do (pthread_sigmask); "reblock-trap", one
// more thread blocks SIGTRAP again every millisecond by the raw rt_sigprocmask system
// call (which no interposed function sees); "churn", one more thread keeps making
// short-lived detached threads (each mallocs and frees) and posix_spawn()s /bin/true,
// whose failures count as wrong results: glibc runs C library functions with every
// signal blocked in each of them.
// So the calls made between two pauses are known exactly, whatever the timing.
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// attach_counter:tick, a USDT probe of systemtap's <sys/sdt.h> (Debian's
// systemtap-sdt-dev) guarded by a semaphore, as dtrace -G declares one: a counter in
// .probes that a tracer raises while attached. Without the header the probe is left out
// and 'u' says so (the run -p test then fails, naming the package).
#if __has_include(<sys/sdt.h>)
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
unsigned short attach_counter_tick_semaphore __attribute__((section(".probes"), used));
#define TICK_ENABLED() __builtin_expect(attach_counter_tick_semaphore != 0, 0)
#define TICK(id, i) DTRACE_PROBE2(attach_counter, tick, id, i)
#define HAVE_TICK 1
#else
#define TICK_ENABLED() 0
#define TICK(id, i) ((void)(id), (void)(i))
#define HAVE_TICK 0
#endif

#define MAX_WORKERS 64

static atomic_int g_stop, g_pause, g_parked, g_running, g_in_handler, g_bad;
static int g_block_all;
static long g_a[MAX_WORKERS], g_b[MAX_WORKERS], g_ticks[MAX_WORKERS];

__attribute__((noinline)) long count_a(long x) {
  long s = 0;
  for (long i = 0; i < 8; ++i) s += (x + i) * 3;
  __asm__ volatile("" : "+r"(s));
  return s;
}

__attribute__((noinline)) long count_b(long x) {
  __asm__ volatile("" : "+r"(x));
  return x ^ 0x5a5a;
}

// No compiler site (the attribute overrides -fpatchable-function-entry) and a first
// instruction shorter than a jump: in a running process its entry is diverted by an
// int3 (its relocated prologue as a jump needs the other threads stopped), or, when a
// thread keeps SIGTRAP blocked, it is not traced. It used to make the whole attach batch
// fail, so that nothing was traced; the other functions must be traced anyway.
__attribute__((noinline, used, patchable_function_entry(0, 0))) long no_site(long x) { return x + 1; }

static void* worker(void* arg) {
  const long id = (long)arg;
  if (g_block_all) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
  }
  atomic_fetch_add(&g_running, 1);
  const struct timespec nap = {0, 100000};
  for (long i = 0; !atomic_load(&g_stop); ++i) {
    if (atomic_load(&g_pause)) {
      atomic_fetch_add(&g_parked, 1);
      while (atomic_load(&g_pause) && !atomic_load(&g_stop)) usleep(200);
      atomic_fetch_sub(&g_parked, 1);
    }
    if (count_a(i) != 24 * i + 84) atomic_fetch_add(&g_bad, 1);
    g_a[id]++;
    if (i % 3 == 0) {
      if (count_b(i) != (i ^ 0x5a5a)) atomic_fetch_add(&g_bad, 1);
      g_b[id]++;
    }
    if (TICK_ENABLED()) {  // runs only while a tracer holds the semaphore
      TICK(id, i);
      g_ticks[id]++;
    }
    if (i % 32 == 0) nanosleep(&nap, NULL);  // a few hundred thousand calls a second
  }
  return NULL;
}

static void on_usr1(int sig) {
  (void)sig;
  atomic_store(&g_in_handler, 1);
  while (!atomic_load(&g_stop)) usleep(1000);
}

static atomic_int g_traps, g_usr2_blocked_in_trap;
static void on_trap(int sig, siginfo_t* si, void* uc) {
  (void)sig, (void)si, (void)uc;
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, NULL, &now);
  atomic_store(&g_usr2_blocked_in_trap, sigismember(&now, SIGUSR2));
  atomic_fetch_add(&g_traps, 1);
}

// What sigaction(SIGTRAP, NULL, &old) shows, in words.
static void describe_trap_action(char* out, size_t n) {
  struct sigaction cur;
  sigaction(SIGTRAP, NULL, &cur);
  const char* who = "other";
  if (cur.sa_handler == SIG_DFL)  // (a union: sa_sigaction too)
    who = "default";
  else if (cur.sa_handler == SIG_IGN)
    who = "ignore";
  else if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_trap)
    who = "own";
  snprintf(out, n, "trap action %s, flags%s%s, mask %s SIGUSR2", who, cur.sa_flags & SA_SIGINFO ? " siginfo" : "",
           cur.sa_flags & SA_RESETHAND ? " resethand" : "", sigismember(&cur.sa_mask, SIGUSR2) ? "with" : "without");
}

static pid_t g_child = -1;
static int g_child_wait = -1;
static void fork_child(void) {
  int go[2], report[2];
  if (pipe(go) != 0 || pipe(report) != 0) return;
  g_child = fork();
  if (g_child == 0) {
    close(go[1]);
    close(report[0]);
    char line[256], trap[128];
    long sum = 0;
    for (long i = 0; i < 1000; ++i) sum += count_a(i) - (24 * i + 84);
    describe_trap_action(trap, sizeof trap);
    struct sigaction usr2;
    sigaction(SIGUSR2, NULL, &usr2);
    const int n = snprintf(line, sizeof line, "child: no_site %ld, count_a %s, %s, usr2 mask %s SIGTRAP\n",
                           no_site(41), sum == 0 ? "right" : "WRONG", trap,
                           sigismember(&usr2.sa_mask, SIGTRAP) ? "with" : "without");
    (void)!write(report[1], line, (size_t)n);
    char c;
    while (read(go[0], &c, 1) > 0) {
    }
    _exit(no_site(6));
  }
  close(go[0]);
  close(report[1]);
  g_child_wait = go[1];
  char line[256];
  ssize_t n = 0, k;
  while (n < (ssize_t)sizeof line - 1 && (k = read(report[0], line + n, 1)) == 1 && line[n] != '\n') ++n;
  line[n] = 0;
  close(report[0]);
  printf("forked %d: %s\n", (int)g_child, line);
  fflush(stdout);
}

static atomic_long g_usr2;
static void on_usr2(int sig) {
  (void)sig;
  atomic_store(&g_usr2, no_site(41));
}

static void* trap_blocker(void* arg) {
  (void)arg;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTRAP);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  atomic_fetch_add(&g_running, 1);
  while (!atomic_load(&g_stop)) usleep(1000);
  return NULL;
}

extern char** environ;

static void* volatile g_sink;  // keeps the compiler from eliding malloc and free

static void* short_lived(void* arg) {
  char* p = malloc(64 + (size_t)arg);
  if (!p) atomic_fetch_add(&g_bad, 1);
  g_sink = p;
  free(p);
  return NULL;
}

static void* churner(void* arg) {
  (void)arg;
  atomic_fetch_add(&g_running, 1);
  for (long i = 0; !atomic_load(&g_stop); ++i) {
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    if (pthread_create(&t, &a, short_lived, (void*)(i % 64)) != 0) atomic_fetch_add(&g_bad, 1);
    pthread_attr_destroy(&a);
    if (i % 8 == 0) {
      char* argv[] = {"/bin/true", NULL};
      pid_t child;
      int st = 0;
      if (posix_spawn(&child, "/bin/true", NULL, NULL, argv, environ) != 0 || waitpid(child, &st, 0) != child ||
          !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        atomic_fetch_add(&g_bad, 1);
    }
    usleep(200);
  }
  return NULL;
}

static void* trap_reblocker(void* arg) {
  (void)arg;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTRAP);
  atomic_fetch_add(&g_running, 1);
  while (!atomic_load(&g_stop)) {
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, &set, NULL, 8);
    usleep(1000);
  }
  return NULL;
}

static void* handler_thread(void* arg) {
  (void)arg;
  pthread_kill(pthread_self(), SIGUSR1);
  return NULL;
}

int main(int argc, char** argv) {
  const int workers = argc > 1 ? atoi(argv[1]) : 8;
  if (workers < 1 || workers > MAX_WORKERS) return 2;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, NULL);
  sa.sa_handler = on_usr2;
  sigfillset(&sa.sa_mask);
  sigaction(SIGUSR2, &sa, NULL);
  const int reblock = argc > 2 && strcmp(argv[2], "reblock-trap") == 0;
  const int block_trap = (argc > 2 && strcmp(argv[2], "block-trap") == 0) || reblock;
  const int churn = argc > 2 && strcmp(argv[2], "churn") == 0;
  g_block_all = argc > 2 && strcmp(argv[2], "block-all") == 0;
  pthread_t t[MAX_WORKERS], h, blocker;
  for (long i = 0; i < workers; ++i) pthread_create(&t[i], NULL, worker, (void*)i);
  pthread_create(&h, NULL, handler_thread, NULL);
  if (block_trap) pthread_create(&blocker, NULL, reblock ? trap_reblocker : trap_blocker, NULL);
  if (churn) pthread_create(&blocker, NULL, churner, NULL);
  while (atomic_load(&g_running) < workers + block_trap + churn || !atomic_load(&g_in_handler)) usleep(1000);
  printf("ready %d\n", (int)no_site(getpid() - 1));
  fflush(stdout);
  char c = 0;
  while (read(0, &c, 1) == 1 && c != 'q') {  // the thread blocked in a system call
    if (c == 'p') {
      atomic_store(&g_pause, 1);
      while (atomic_load(&g_parked) < workers) usleep(100);
      long a = 0, b = 0;
      for (int i = 0; i < workers; ++i) {
        a += g_a[i];
        b += g_b[i];
      }
      printf("counts %ld %ld\n", a, b);
      fflush(stdout);
    } else if (c == 'x') {
      execl("/bin/sleep", "sleep", "1", (char*)NULL);
      return 127;
    } else if (c == 't') {
      struct sigaction ta;
      memset(&ta, 0, sizeof ta);
      ta.sa_sigaction = on_trap;
      ta.sa_flags = SA_SIGINFO;
      sigaction(SIGTRAP, &ta, NULL);
      printf("trap handler set\n");
      fflush(stdout);
    } else if (c == 'T') {
      raise(SIGTRAP);
      struct sigaction cur;
      sigaction(SIGTRAP, NULL, &cur);
      printf("trap handler %s, %d traps\n", cur.sa_sigaction == on_trap ? "own" : "not own",
             atomic_load(&g_traps));
      fflush(stdout);
    } else if (c == 's') {
      raise(SIGUSR2);
      struct sigaction cur;
      sigaction(SIGUSR2, NULL, &cur);
      printf("usr2 %s, mask %s SIGTRAP\n", atomic_load(&g_usr2) == 42 ? "handled" : "not handled",
             sigismember(&cur.sa_mask, SIGTRAP) ? "with" : "without");
      fflush(stdout);
    } else if (c == 'g') {
      char trap[128];
      describe_trap_action(trap, sizeof trap);
      printf("%s\n", trap);
      fflush(stdout);
    } else if (c == 'h') {
      struct sigaction ta;
      memset(&ta, 0, sizeof ta);
      ta.sa_sigaction = on_trap;
      ta.sa_flags = SA_SIGINFO | SA_RESETHAND;
      sigaddset(&ta.sa_mask, SIGUSR2);
      sigaction(SIGTRAP, &ta, NULL);
      printf("trap handler set once\n");
      fflush(stdout);
    } else if (c == 'i') {
      __asm__ volatile("int3");
      printf("int3: %d traps, usr2 %s in the handler\n", atomic_load(&g_traps),
             atomic_load(&g_usr2_blocked_in_trap) ? "blocked" : "unblocked");
      fflush(stdout);
    } else if (c == 'b') {
      sigset_t trap, now;
      sigemptyset(&trap);
      sigaddset(&trap, SIGTRAP);
      pthread_sigmask(SIG_BLOCK, &trap, NULL);
      const long r = no_site(1);
      pthread_sigmask(SIG_BLOCK, NULL, &now);
      sigprocmask(SIG_UNBLOCK, &trap, NULL);
      printf("blocked: no_site %ld, mask %s SIGTRAP\n", r, sigismember(&now, SIGTRAP) ? "with" : "without");
      fflush(stdout);
    } else if (c == 'u') {
      long ticks = 0;
      for (int i = 0; i < workers; ++i) ticks += g_ticks[i];
#if HAVE_TICK
      printf("ticks %ld, semaphore %u\n", ticks,
             (unsigned)__atomic_load_n(&attach_counter_tick_semaphore, __ATOMIC_SEQ_CST));
#else
      printf("ticks %ld, no USDT probe: built without <sys/sdt.h> (systemtap-sdt-dev)\n", ticks);
#endif
      fflush(stdout);
    } else if (c == 'f') {
      fork_child();
    } else if (c == 'F') {
      int status = 0;
      close(g_child_wait);
      waitpid(g_child, &status, 0);
      printf("child exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
      fflush(stdout);
    } else if (c == 'r') {
      atomic_store(&g_pause, 0);
      printf("resumed\n");
      fflush(stdout);
    }
  }
  atomic_store(&g_stop, 1);
  for (int i = 0; i < workers; ++i) pthread_join(t[i], NULL);
  pthread_join(h, NULL);
  if (block_trap || churn) pthread_join(blocker, NULL);
  if (atomic_load(&g_bad)) printf("BAD: %d wrong results\n", atomic_load(&g_bad));
  else printf("ok: %d workers\n", workers);
  return atomic_load(&g_bad) ? 1 : 0;
}
