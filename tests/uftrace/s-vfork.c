// uftrace-style test program: vfork, then exec in the child (uftrace's s-vfork.c
// shape). The child runs this program again with an argument, which makes it call
// exec_child() and exit; the parent waits for it, then calls parent_work().
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static volatile int sink;

NOINLINE void exec_child(void) { sink = 3; }
NOINLINE void parent_work(void) { sink = 2; }

int main(int argc, char** argv) {
  if (argc > 1) {
    exec_child();
    return 0;
  }
  pid_t pid = vfork();
  if (pid == 0) {
    execl(argv[0], argv[0], "child", (char*)0);
    _exit(127);
  }
  waitpid(pid, 0, 0);
  parent_work();
  return 0;
}
