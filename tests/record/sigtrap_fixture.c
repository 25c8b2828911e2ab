/* Threads that block SIGTRAP while a function they call is live-patched and probed: the
 * agent keeps SIGTRAP deliverable (src/agent/agent.cpp), so under `utramp record` the
 * process survives; run alone, the kernel kills it on the first int3 such a thread hits.
 *
 *   1. two threads block SIGTRAP, one with pthread_sigmask, one with sigprocmask, check
 *      that the mask they read back still shows it, and call sig_probed in a loop;
 *   2. meanwhile main attaches and detaches an int3 probe (a post-handler keeps it from
 *      being jump-optimised) on sig_probed, again and again: every attach and detach is
 *      a live patch batch, and every call in between traps;
 *   3. main installs a SIGTRAP handler of its own, and a SIGUSR1 handler whose mask holds
 *      SIGTRAP; probes still reach utramp (the program's handler is chained, not
 *      installed in place of utramp's), and a SIGTRAP the program raises still reaches
 *      the program's handler.
 * Prints what it saw; exits 0 when everything held. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <utramp/utramp.h>

static volatile int stop;
static volatile int started;
static volatile long hits;
static volatile int program_traps;
static volatile int usr1_probed;
static int asked_shown[2];

__attribute__((noinline)) int sig_probed(int x) {
  __asm__ volatile("");
  return x * 3 + 1;
}

static int pre(struct utramp_regs *regs, uint64_t cookie) {
  (void)regs;
  (void)cookie;
  __atomic_add_fetch(&hits, 1, __ATOMIC_RELAXED);
  return 0;
}

static int post(struct utramp_regs *regs, uint64_t cookie) {
  (void)regs;
  (void)cookie;
  return 0;
}

static void *blocker(void *arg) {
  const int with_pthread = arg != NULL;
  sigset_t trap, now;
  sigemptyset(&trap);
  sigaddset(&trap, SIGTRAP);
  if (with_pthread) pthread_sigmask(SIG_BLOCK, &trap, NULL);
  else sigprocmask(SIG_BLOCK, &trap, NULL);
  pthread_sigmask(SIG_SETMASK, NULL, &now);
  asked_shown[with_pthread] = sigismember(&now, SIGTRAP);
  __atomic_add_fetch(&started, 1, __ATOMIC_RELAXED);
  int acc = 0;
  while (!stop) acc = sig_probed(acc);
  return (void *)(long)acc;
}

static void on_trap(int sig) {
  (void)sig;
  ++program_traps;
}

static void on_usr1(int sig) {
  (void)sig;
  usr1_probed = sig_probed(1) == 4;
}

int main(void) {
  pthread_t t[2];
  for (long i = 0; i < 2; ++i) pthread_create(&t[i], NULL, blocker, (void *)i);
  while (started < 2) usleep(100);
  int attached = 0;
  for (int round = 0; round < 200; ++round) {
    struct utramp_probe *p = utramp_probe_attach((void *)&sig_probed, pre, post, 0);
    if (!p) {
      fprintf(stderr, "utramp_probe_attach: %s\n", utramp_last_error());
      break;
    }
    ++attached;
    usleep(200);
    utramp_probe_detach(p);
  }
  stop = 1;
  for (int i = 0; i < 2; ++i) pthread_join(t[i], NULL);
  printf("blocked threads survived %d probe attachments\n", attached);
  printf("mask read back shows SIGTRAP: sigprocmask %d, pthread_sigmask %d\n", asked_shown[0],
         asked_shown[1]);
  printf("probe hits in blocked threads: %s\n", hits > 0 ? "yes" : "no");

  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_trap;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTRAP, &sa, NULL);
  sigaction(SIGTRAP, NULL, &old);
  sa.sa_handler = on_usr1;
  sigaddset(&sa.sa_mask, SIGTRAP);
  sigaction(SIGUSR1, &sa, NULL);

  struct utramp_probe *p = utramp_probe_attach((void *)&sig_probed, pre, post, 0);
  const long before = hits;
  const int ok = sig_probed(2) == 7;
  raise(SIGUSR1);
  raise(SIGTRAP);
  if (p) utramp_probe_detach(p);
  printf("after the program's own SIGTRAP handler: sigaction reports it %s, probe hits %ld, "
         "program handler ran %d, probed in a SIGUSR1 handler %s\n",
         old.sa_handler == on_trap ? "yes" : "no", hits - before, program_traps,
         usr1_probed ? "yes" : "no");
  const int good = attached == 200 && asked_shown[0] == 1 && asked_shown[1] == 1 && hits > 0 &&
                   ok && old.sa_handler == on_trap && hits - before == 2 && program_traps == 1 &&
                   usr1_probed;
  return good ? 0 : 1;
}
