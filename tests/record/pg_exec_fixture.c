// Built with -pg (gmon: ITIMER_PROF armed before main, SIGPROF handled), then execs
// argv[1..]: the exec'd program inherits the running profiling timer, and SIGPROF's
// default action (the end of the process) with it. Untraced, a short program ends
// before the timer expires; traced with --follow-exec, it must too (faults_e2e_test.cpp).
#include <stdio.h>
#include <unistd.h>

static volatile long g_sink;

__attribute__((noinline)) void before_exec(int n) { g_sink += n; }

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PROGRAM [ARGS]\n", argv[0]);
    return 2;
  }
  before_exec(argc);
  execv(argv[1], argv + 1);
  perror("execv");
  return 127;
}
