/* --follow-exec, the second program (exec_first execs it): other functions at other
 * addresses. */
#include <stdio.h>

__attribute__((noinline)) int second_image_work(int x) {
  __asm__ volatile("");
  return x * 3;
}

int main(void) {
  int r = 0;
  for (int i = 0; i < 4; ++i) r += second_image_work(i);
  printf("second %d\n", r);
  return 0;
}
