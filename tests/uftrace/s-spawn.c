// uftrace-style test program: a child made by posix_spawn, running this program again
// with an argument (it then calls spawned() and exits); the parent waits for it.
#include <spawn.h>
#include <sys/wait.h>

#define NOINLINE __attribute__((noinline))

extern char** environ;
static volatile int sink;

NOINLINE void spawned(void) { sink = 3; }
NOINLINE int spawn_self(char* self) {
  char* args[] = {self, (char*)"child", 0};
  pid_t pid;
  if (posix_spawn(&pid, self, 0, 0, args, environ) != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

int main(int argc, char** argv) {
  if (argc > 1) {
    spawned();
    return 0;
  }
  return spawn_self(argv[0]) == 0 ? 0 : 1;
}
