// The program scripts/soak.sh records again and again: threads making traced calls of
// known shapes while timer signals arrive (their handlers make traced calls too),
// exceptions unwind and longjmps jump over traced frames, and the process forks a child
// and forks one that execs this program again. It checks itself and counts the traced
// calls each of its threads made, so that the soak can check the trace against them.
//
//   soak_target REPORT_DIR THREADS ITERATIONS     the main program
//   soak_target REPORT_DIR exec                   what the exec'd child runs
//
// Every traced function is extern "C" and starts with `k_` (soak.sh records -F 'k_*').
// Each process writes REPORT_DIR/report-PID.txt at its end, made whole by a rename:
//   "call PID TID N F" N traced calls on that thread (each is an entry and an exit),
//                      F forks it made (each is a fork event in its ring)
//   "ok" or "bad WHAT" whether every result was the one expected
// It prints "soak ok" (or what went wrong, exiting 1) on stdout.
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#define K extern "C" __attribute__((noipa, used))

namespace {

volatile long sink;
// Traced calls made on this thread: by its own code, and by the SIGALRM handler (which
// never interrupts itself). Two counters: a handler's increment landing between the
// load and the store of the other's would be lost.
thread_local long t_calls, t_sig_calls;
const char* g_report_dir = ".";

constexpr int kMaxThreads = 32;
struct PerThread {
  long tid = 0, calls = 0, forks = 0;
};
PerThread g_threads[kMaxThreads + 1];
std::atomic<int> g_bad{0};
char g_bad_what[128];

void bad(const char* what) {
  if (g_bad.fetch_add(1) == 0) snprintf(g_bad_what, sizeof g_bad_what, "%s", what);
}

}  // namespace

K long k_leaf(long x) {
  ++t_calls;
  return x + 1;
}

K long k_rec(int n) {
  ++t_calls;
  if (n <= 1) return k_leaf(n);
  return k_rec(n - 1) + n;
}

K void k_sig_inner(void) {
  ++t_sig_calls;
  sink = 7;
}

K void k_sig_outer(void) {
  ++t_sig_calls;
  k_sig_inner();
}

K void k_throw(int n) {
  ++t_calls;
  if (n <= 1) throw std::runtime_error("soak");
  k_throw(n - 1);
  sink = n;
}

K int k_catch(int n) {
  ++t_calls;
  try {
    k_throw(n);
  } catch (const std::runtime_error&) {
    return 1;
  }
  return 0;
}

K void k_jump(jmp_buf* jb, int n) {
  ++t_calls;
  if (n <= 1) longjmp(*jb, 1);
  k_jump(jb, n - 1);
  sink = n;
}

K void k_after(void) {
  ++t_calls;
  sink = 3;
}

K int k_jumper(int n) {
  ++t_calls;
  jmp_buf jb;
  volatile int jumped = 0;
  if (setjmp(jb) == 0) k_jump(&jb, n);
  else jumped = 1;
  k_after();  // the first traced call after the longjmp: closes the frames jumped over
  return jumped;
}

K long k_child_work(int n) {
  ++t_calls;
  long s = 0;
  for (int i = 1; i <= n; ++i) s += k_rec(i % 5 + 1);
  return s;
}

namespace {

void on_alarm(int) {
  const int saved = errno;
  k_sig_outer();
  errno = saved;
}

// k_rec(n) returns 1 + 2 + ... + n (k_leaf(1) = 2, then + n for each level above 1).
long expected_rec(int n) { return n <= 1 ? 2 : expected_rec(n - 1) + n; }

void* worker(void* arg) {
  const int k = static_cast<int>(reinterpret_cast<long>(arg));
  const long iters = g_threads[k].calls;  // passed in, replaced by the count
  g_threads[k].tid = syscall(SYS_gettid);
  (void)k_leaf(0);  // the first traced call claims the ring; signals only after it
  timer_t timer{};
  sigevent sev{};
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = SIGALRM;
  sev._sigev_un._tid = static_cast<pid_t>(g_threads[k].tid);
  const bool timing = timer_create(CLOCK_MONOTONIC, &sev, &timer) == 0;
  if (timing) {
    itimerspec its{};
    its.it_interval.tv_nsec = 700 * 1000;
    its.it_value.tv_nsec = 700 * 1000 + k * 10000;
    timer_settime(timer, 0, &its, nullptr);
  }
  sigset_t alarm;
  sigemptyset(&alarm);
  sigaddset(&alarm, SIGALRM);
  pthread_sigmask(SIG_UNBLOCK, &alarm, nullptr);
  for (long i = 0; i < iters; ++i) {
    const int n = 1 + static_cast<int>((i + k) % 6);
    if (k_rec(n) != expected_rec(n)) bad("k_rec returned a wrong value");
    if (i % 7 == 3 && k_catch(1 + static_cast<int>(i % 4)) != 1) bad("an exception was not caught");
    if (i % 11 == 5 && k_jumper(1 + static_cast<int>(i % 3)) != 1) bad("a longjmp did not land");
  }
  pthread_sigmask(SIG_BLOCK, &alarm, nullptr);
  if (timing) timer_delete(timer);
  timespec zero{};
  while (sigtimedwait(&alarm, nullptr, &zero) == SIGALRM) on_alarm(SIGALRM);  // still pending
  g_threads[k].calls = t_calls + t_sig_calls;
  return nullptr;
}

// report-PID.txt, whole: written to a temporary name, then renamed.
void write_report(int nthreads) {
  const std::string path = std::string(g_report_dir) + "/report-" + std::to_string(getpid()) + ".txt";
  const std::string tmp = path + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  if (!f) return;
  for (int k = 0; k <= nthreads; ++k)
    if (g_threads[k].tid)
      fprintf(f, "call %d %ld %ld %ld\n", getpid(), g_threads[k].tid, g_threads[k].calls, g_threads[k].forks);
  if (g_bad.load()) fprintf(f, "bad %s\n", g_bad_what);
  else fprintf(f, "ok\n");
  fclose(f);
  rename(tmp.c_str(), path.c_str());
}

int finish(int nthreads) {
  write_report(nthreads);
  if (g_bad.load()) {
    printf("soak bad: %s\n", g_bad_what);
    return 1;
  }
  printf("soak ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: soak_target REPORT_DIR THREADS ITERATIONS | REPORT_DIR exec\n");
    return 2;
  }
  g_report_dir = argv[1];
  if (std::strcmp(argv[2], "exec") == 0) {  // the exec'd child: this program again
    g_threads[0].tid = syscall(SYS_gettid);
    if (k_child_work(200) != 200 / 5 * (2 + 4 + 7 + 11 + 16)) bad("the exec'd child computed a wrong sum");
    g_threads[0].calls = t_calls;
    return finish(0);
  }
  const int nthreads = std::atoi(argv[2]);
  const long iters = std::atol(argv[3]);
  if (nthreads < 1 || nthreads > kMaxThreads || iters < 1) return 2;
  struct sigaction sa {};
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, nullptr);
  sigset_t alarm;
  sigemptyset(&alarm);
  sigaddset(&alarm, SIGALRM);
  pthread_sigmask(SIG_BLOCK, &alarm, nullptr);  // only the workers take it
  g_threads[nthreads].tid = syscall(SYS_gettid);  // the main thread's slot is the last

  pthread_t t[kMaxThreads];
  for (int k = 0; k < nthreads; ++k) {
    g_threads[k].calls = iters;
    if (pthread_create(&t[k], nullptr, worker, reinterpret_cast<void*>(static_cast<long>(k))) != 0) return 3;
  }
  // Meanwhile: a forked child that works and exits, and one that execs this program.
  fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    const long s = k_child_work(100);
    g_threads[0] = {static_cast<long>(syscall(SYS_gettid)), t_calls, 0};
    for (int k = 1; k <= nthreads; ++k) g_threads[k] = {};
    if (s != 100 / 5 * (2 + 4 + 7 + 11 + 16)) bad("the forked child computed a wrong sum");
    write_report(0);
    _exit(g_bad.load() ? 1 : 0);
  }
  const pid_t execer = fork();
  if (execer == 0) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) _exit(126);
    self[n] = 0;
    // Its output would interleave with ours: the exec'd child's goes nowhere.
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 1);
    char exec_arg[] = "exec";
    char* args[] = {self, argv[1], exec_arg, nullptr};
    execv(self, args);
    _exit(127);
  }
  for (int k = 0; k < nthreads; ++k) pthread_join(t[k], nullptr);
  int st = 0;
  if (child < 0 || waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    bad("the forked child failed");
  if (execer < 0 || waitpid(execer, &st, 0) != execer || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    bad("the exec'd child failed");
  g_threads[nthreads].calls = t_calls;
  g_threads[nthreads].forks = (child > 0) + (execer > 0);
  return finish(nthreads);
}
