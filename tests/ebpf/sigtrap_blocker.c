/* A thread that blocks SIGTRAP with the raw rt_sigprocmask system call -- which the agent
 * cannot see -- and then calls trap_target, whose first instructions cannot be moved
 * into a jump-optimised detour (a system call is among them): a uprobe there stays an
 * int3 (bpf/int3_uprobe.bpf.c), and the kernel ends the process when that thread
 * reaches it. The main thread calls it first, SIGTRAP deliverable: the probe fires.
 * The blocking thread prints its id, then waits 1.5 s before its call, so that
 * `utramp run` can see its mask. Built without patchable entries: the probe is on the
 * function's own first instruction. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

__attribute__((naked, noinline)) long trap_target(void) {
  __asm__("xor %eax, %eax\n\t"
          "mov $39, %al\n\t" /* getpid */
          "syscall\n\t"
          "ret\n\t");
}

static void* blocker(void* arg) {
  (void)arg;
  const unsigned long trap = 1ul << (SIGTRAP - 1);
  syscall(SYS_rt_sigprocmask, SIG_BLOCK, &trap, NULL, sizeof trap);
  printf("blocker %ld\n", (long)syscall(SYS_gettid));
  fflush(stdout);
  usleep(1500 * 1000);
  trap_target();
  return NULL;
}

int main(void) {
  printf("main %d\n", trap_target() == getpid());
  fflush(stdout);
  pthread_t t;
  pthread_create(&t, NULL, blocker, NULL);
  pthread_join(t, NULL);
  printf("survived\n");
  return 0;
}
