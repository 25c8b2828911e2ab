/* --follow-exec, the first program: calls first_image_work, then execs the program its
 * arguments name (exec_second), as the same process. */
#include <stdio.h>
#include <unistd.h>

__attribute__((noinline)) int first_image_work(int x) {
  __asm__ volatile("");
  return x * 2;
}

int main(int argc, char** argv) {
  int r = 0;
  for (int i = 0; i < 3; ++i) r += first_image_work(i);
  printf("first %d\n", r);
  fflush(stdout);
  if (argc < 2) return 1;
  execv(argv[1], argv + 1);
  perror("execv");
  return 2;
}
