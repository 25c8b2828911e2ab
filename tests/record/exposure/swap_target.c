/* Traced while another user swaps its trace directory: runs, says so by creating the
 * file argv[1], waits (20 s at most) for the file argv[2] to exist, then forks. The
 * forked child's agent writes its process's files then, into the directory the path
 * now names. Prints the child's pid. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) int swap_work(int x) {
  __asm__ volatile("");
  return x + 1;
}

int main(int argc, char** argv) {
  if (argc < 3) return 1;
  int r = swap_work(1);
  const int fd = open(argv[1], O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return 3;
  close(fd);
  for (int i = 0; i < 10000 && access(argv[2], F_OK) != 0; ++i) usleep(2000);
  const pid_t child = fork();
  if (child == 0) _exit(swap_work(r) == 3 ? 0 : 4);
  int st = 0;
  waitpid(child, &st, 0);
  printf("child %d\n", (int)child);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 5;
}
