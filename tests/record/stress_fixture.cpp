// The program the tracer stress tests (record_stress_test.cpp) record: many threads
// making calls of known shapes while signals, forks, exceptions and longjmps happen, so
// that the test can check the recorded trace for exact properties. Built with g++ and
// clang++ (tests/record/CMakeLists.txt); every traced function is extern "C" (plain
// names) and starts with `s_` (the test records with -F 's_*').
//
//   stress_fixture threads T N          T threads, each N iterations of work(k, i)
//   stress_fixture signals T N US       the same, and a per-thread timer firing every US
//                                       microseconds whose handler calls traced
//                                       functions (s_sig_outer -> s_sig_leaf)
//   stress_fixture altstack T N US      signals, with the handler on an alternate signal
//                                       stack (SA_ONSTACK): above the thread's stack for
//                                       odd threads, below it for even ones; and first,
//                                       once per thread, a handler left by siglongjmp:
//                                       s_alt_jumper { sigsetjmp; s_raiser { SIGUSR1 ->
//                                       handler -> s_sig_jump { siglongjmp } }; s_after }
//                                       (s_raiser and s_sig_jump exit by longjmp)
//   stress_fixture sigjump T N US       signals, and the handler siglongjmps back to the
//                                       worker's loop when it interrupted s_top(k, i)
//                                       (often inside the tracer's own code), which then
//                                       goes on with iteration i + 1
//   stress_fixture fork T N             the same as threads; in iteration N/2 every
//                                       thread forks from three traced frames deep
//                                       (s_top -> s_fork_a -> s_fork_b); the child runs
//                                       child_work and _exits from inside those frames
//   stress_fixture unwind T N           each iteration also throws a C++ exception
//                                       through traced frames and longjmps over others
//
// Iteration i of thread k (the test computes the same counts):
//   s_top(k, i) {                       depth 0
//     s_rec(n) ... s_rec(1) {           n = 1 + (i + k) % 7: recursion, depths 1..n
//       s_leaf()                        at depth n + 1
//     }
//     s_leaf2()                         depth 1
//   }
// unwind adds, at depth 0 after s_top (from iteration 1: iteration 0 is s_top alone):
//   s_catcher(i) { s_thrower(m) { s_throw_rec(m)...s_throw_rec(1) {throw} } }
//                                       m = 1 + i % 4; every s_thrower and s_throw_rec
//                                       frame exits unwound, s_catcher returns
//   s_jumper(i) { setjmp; s_jump_rec(m)...s_jump_rec(1) {longjmp}; s_after() }
//                                       the s_jump_rec frames exit by longjmp; s_after
//                                       is called by s_jumper after the longjmp
//
// Output (stdout, after every thread has joined): one line per thread,
//   "thread K tid TID handler H"       H: signal handler runs on that thread
// and for fork, one line per child: "child K pid PID status S".
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#if defined(__clang__)
#define FX extern "C" __attribute__((noinline, used))
#else
#define FX extern "C" __attribute__((noipa, used))
#endif

namespace {

volatile long sink;

enum class Mode { threads, signals, altstack, sigjump, fork, unwind };
Mode g_mode = Mode::threads;
long g_iters = 0;
long g_period_us = 0;

constexpr int kMaxThreads = 64;
struct ThreadResult {
  long tid = 0;
  long handler_runs = 0;
  long child_pid = 0;
  int child_status = -1;
  long jumps = 0;
};
ThreadResult g_results[kMaxThreads];

thread_local long t_handler_runs;  // written by this thread's handler only

// sigjump: where the handler jumps to, whether it may, how often it did.
void (*g_asan_no_return)() = nullptr;
thread_local sigjmp_buf t_loop_jb;
thread_local volatile sig_atomic_t t_armed;
thread_local long t_jumps;

// altstack: each thread's stack and signal stack, one mapping (main sets them up).
constexpr size_t kStackBytes = 1 << 20, kAltBytes = 256 << 10;
void* g_altstacks[kMaxThreads];

}  // namespace

FX void s_leaf(void) { sink = 1; }

FX void s_leaf2(void) { sink = 2; }

FX void s_rec(int n) {
  sink = n;
  if (n > 1) s_rec(n - 1);
  else s_leaf();
  sink = n;
}

FX void s_sig_leaf(void) { sink = 7; }

FX void s_sig_outer(void) {
  sink = 6;
  s_sig_leaf();
  sink = 6;
}

namespace {

void on_timer(int) {
  const int saved = errno;
  s_sig_outer();
  ++t_handler_runs;
  errno = saved;
  if (g_mode == Mode::sigjump && t_armed) {
    t_armed = 0;
    // Under AddressSanitizer (the agent instrumented, this program not): what its
    // siglongjmp interceptor would do, since this call binds to libc's — unpoison the
    // stack left behind, or the redzones of the agent's frames stay poisoned.
    if (g_asan_no_return) g_asan_no_return();
    siglongjmp(t_loop_jb, 1);
  }
}

}  // namespace

// ---- altstack: a handler left by siglongjmp ----

thread_local sigjmp_buf t_alt_jb;

FX void s_sig_jump(void) {
  sink = 9;
  siglongjmp(t_alt_jb, 1);
}

namespace {

void on_usr1(int) { s_sig_jump(); }

}  // namespace

FX void s_raiser(void) {
  sink = 10;
  pthread_kill(pthread_self(), SIGUSR1);  // delivered before it returns
  sink = 10;
}

FX void s_after(void);

FX int s_alt_jumper(void) {
  sink = 11;
  volatile int jumped = 0;
  if (sigsetjmp(t_alt_jb, 1) == 0) s_raiser();
  else jumped = 1;
  s_after();
  sink = 11;
  return jumped;
}

FX void s_child_work(void) {
  sink = 8;
  for (int i = 0; i < 10; ++i) s_rec(3);
  sink = 8;
}

FX void s_fork_b(int k) {
  sink = k;
  fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    s_child_work();
    _exit(0);  // from inside s_top -> s_fork_a -> s_fork_b: they never return
  }
  int st = -1;
  while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  g_results[k].child_pid = pid;
  g_results[k].child_status = st;
  sink = k;
}

FX void s_fork_a(int k) {
  sink = k;
  s_fork_b(k);
  sink = k;
}

FX void s_top(int k, long i) {
  sink = k;
  s_rec(1 + static_cast<int>((i + k) % 7));
  if (g_mode == Mode::fork && i == g_iters / 2) s_fork_a(k);
  s_leaf2();
  sink = k;
}

// ---- unwind: exceptions and longjmp ----

FX void s_throw_rec(int n) {
  sink = n;
  if (n > 1) s_throw_rec(n - 1);
  else throw std::runtime_error("stress");
  sink = n;
}

FX void s_thrower(int m) {
  sink = m;
  s_throw_rec(m);
  sink = m;
}

FX int s_catcher(long i) {
  sink = i;
  try {
    s_thrower(1 + static_cast<int>(i % 4));
  } catch (const std::runtime_error&) {
    return 1;
  }
  return 0;
}

FX void s_jump_rec(jmp_buf* jb, int n) {
  sink = n;
  if (n > 1) s_jump_rec(jb, n - 1);
  else longjmp(*jb, 1);
  sink = n;
}

FX void s_after(void) { sink = 3; }

FX int s_jumper(long i) {
  jmp_buf jb;
  sink = i;
  volatile int jumped = 0;
  if (setjmp(jb) == 0) s_jump_rec(&jb, 1 + static_cast<int>(i % 4));
  else jumped = 1;
  s_after();  // the first traced call after the longjmp, from the frame it returned to
  sink = i;
  return jumped;
}

namespace {

void* worker(void* arg) {
  const int k = static_cast<int>(reinterpret_cast<long>(arg));
  g_results[k].tid = syscall(SYS_gettid);
  if (g_mode == Mode::altstack) {
    stack_t ss{};
    ss.ss_sp = g_altstacks[k];
    ss.ss_size = kAltBytes;
    if (sigaltstack(&ss, nullptr) != 0) {
      perror("sigaltstack");
      exit(3);
    }
  }
  // The first traced call claims the thread's ring; the timer starts after it, so
  // that every handler run lands in a thread that has one.
  volatile long i = 0;  // volatile: kept across siglongjmp (sigjump)
  s_top(k, i++);
  if (g_mode == Mode::altstack && s_alt_jumper() != 1) {
    fprintf(stderr, "thread %d: the handler did not longjmp\n", k);
    exit(4);
  }
  timer_t timer{};
  bool timing = false;
  if (g_mode == Mode::signals || g_mode == Mode::altstack || g_mode == Mode::sigjump) {
    sigevent sev{};
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGALRM;
    sev._sigev_un._tid = static_cast<pid_t>(g_results[k].tid);
    if (timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0) {
      perror("timer_create");
      exit(3);
    }
    itimerspec its{};
    its.it_interval.tv_nsec = g_period_us * 1000;
    its.it_value.tv_nsec = g_period_us * 1000 + k * 1000;
    timer_settime(timer, 0, &its, nullptr);
    timing = true;
    sigset_t set;  // blocked by main before this thread was created
    sigemptyset(&set);
    sigaddset(&set, SIGALRM);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  }
  int bad = 0;
  for (; i < g_iters; ++i) {
    if (g_mode == Mode::sigjump) {
      if (sigsetjmp(t_loop_jb, 1) == 0) {
        t_armed = 1;
        s_top(k, i);
        t_armed = 0;
      } else {
        ++t_jumps;
      }
      continue;
    }
    s_top(k, i);
    if (g_mode == Mode::unwind) {
      bad += s_catcher(i) != 1;
      bad += s_jumper(i) != 1;
    }
  }
  if (timing) {
    // Stop the timer, then take any signal still pending before the count is read.
    timer_delete(timer);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    timespec zero{};
    while (sigtimedwait(&set, nullptr, &zero) == SIGALRM) {
      s_sig_outer();  // what the handler would have done
      ++t_handler_runs;
    }
  }
  g_results[k].handler_runs = t_handler_runs;
  g_results[k].jumps = t_jumps;
  if (bad) {
    fprintf(stderr, "thread %d: %d wrong unwind results\n", k, bad);
    exit(4);
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s threads|signals|altstack|sigjump|fork|unwind THREADS ITERS [PERIOD_US]\n", argv[0]);
    return 2;
  }
  const char* what = argv[1];
  if (!strcmp(what, "threads")) g_mode = Mode::threads;
  else if (!strcmp(what, "signals")) g_mode = Mode::signals;
  else if (!strcmp(what, "altstack")) g_mode = Mode::altstack;
  else if (!strcmp(what, "sigjump")) g_mode = Mode::sigjump;
  else if (!strcmp(what, "fork")) g_mode = Mode::fork;
  else if (!strcmp(what, "unwind")) g_mode = Mode::unwind;
  else {
    fprintf(stderr, "unknown scenario %s\n", what);
    return 2;
  }
  const int nthreads = atoi(argv[2]);
  g_iters = atol(argv[3]);
  g_period_us = argc > 4 ? atol(argv[4]) : 100;
  if (nthreads < 1 || nthreads > kMaxThreads || g_iters < 1 || g_period_us < 1 ||
      g_period_us >= 1000000) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  g_asan_no_return = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "__asan_handle_no_return"));
  if (g_mode == Mode::signals || g_mode == Mode::altstack || g_mode == Mode::sigjump) {
    struct sigaction sa {};
    sa.sa_handler = on_timer;
    sa.sa_flags = SA_RESTART | (g_mode == Mode::altstack ? SA_ONSTACK : 0);
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, nullptr);
    if (g_mode == Mode::altstack) {
      sa.sa_handler = on_usr1;
      sigaction(SIGUSR1, &sa, nullptr);
    }
    // Only the workers take it (their timers name them); main never does.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }
  pthread_t t[kMaxThreads];
  for (int k = 0; k < nthreads; ++k) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (g_mode == Mode::altstack) {
      // One mapping per thread: its stack, and its signal stack above or below it.
      void* m = mmap(nullptr, kStackBytes + kAltBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
      if (m == MAP_FAILED) {
        perror("mmap");
        return 3;
      }
      char* base = static_cast<char*>(m);
      const bool above = k % 2 == 1;
      g_altstacks[k] = above ? base + kStackBytes : base;
      pthread_attr_setstack(&attr, above ? base : base + kAltBytes, kStackBytes);
    }
    if (pthread_create(&t[k], &attr, worker, reinterpret_cast<void*>(static_cast<long>(k))) != 0) {
      perror("pthread_create");
      return 3;
    }
    pthread_attr_destroy(&attr);
  }
  for (int k = 0; k < nthreads; ++k) pthread_join(t[k], nullptr);
  int failed = 0;
  for (int k = 0; k < nthreads; ++k) {
    printf("thread %d tid %ld handler %ld\n", k, g_results[k].tid, g_results[k].handler_runs);
    if (g_mode == Mode::sigjump) printf("jumps %d %ld\n", k, g_results[k].jumps);
    if (g_mode == Mode::fork) {
      printf("child %d pid %ld status %d\n", k, g_results[k].child_pid, g_results[k].child_status);
      failed += !(g_results[k].child_pid > 0 && WIFEXITED(g_results[k].child_status) &&
                  WEXITSTATUS(g_results[k].child_status) == 0);
    }
  }
  return failed ? 5 : 0;
}
