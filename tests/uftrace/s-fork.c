// uftrace-style test program: fork (uftrace's s-fork.c shape). The parent waits for the
// child before it calls anything more.
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static volatile int sink;

NOINLINE void child_work(void) { sink = 1; }
NOINLINE void parent_work(void) { sink = 2; }
NOINLINE int do_fork(void) { return fork(); }

int main(void) {
  int pid = do_fork();
  if (pid == 0) {
    child_work();
    _exit(0);
  }
  waitpid(pid, 0, 0);
  parent_work();
  return 0;
}
