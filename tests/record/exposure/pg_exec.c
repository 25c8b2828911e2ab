// A -pg program that execs itself (the second time with "child"), as a gmon-profiled
// program that runs another does. The profiling timer (ITIMER_PROF) survives the exec and
// SIGPROF's handler does not: the new image dies of SIGPROF unless gmon's start-up in it
// installs a handler first. Here the timer is set to expire after 5 ms of CPU time (half a
// gmon period) just before the exec: untraced, the new image's start-up before gmon's takes
// far less, and it lives.
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

__attribute__((noinline)) int pg_exec_work(int n) { return n * 3; }

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0) {
    printf("child %d\n", pg_exec_work(7));
    return 0;
  }
  printf("parent %d\n", pg_exec_work(2));
  fflush(stdout);
  const struct itimerval soon = {{0, 10000}, {0, 5000}};
  setitimer(ITIMER_PROF, &soon, NULL);
  execl("/proc/self/exe", argv[0], "child", (char*)NULL);
  perror("execl");
  return 1;
}
