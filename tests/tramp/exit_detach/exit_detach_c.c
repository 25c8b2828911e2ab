/* Detach once exit has begun: utramp_link_detach called from an atexit handler, or from
 * an ELF destructor, after the exit handler libutramp registers when it loads. This
 * program loads libutramp with dlopen (as a plugin would), so exit runs that handler
 * first: handlers run in reverse order of registration, the atexit handler below was
 * registered before the dlopen, and ELF destructors run from _dl_fini, registered when
 * the process started. (Linked the usual way, libutramp registers its handler before
 * main's static objects and _dl_fini, so their detaches run before it.)
 *
 *   exit_detach_c LIBUTRAMP atexit|dtor [sleeper]
 *
 * With `sleeper`, a thread is blocked inside the traced function when exit begins, so
 * detach cannot wait for the image to be freed and disables the program's call in it;
 * the sleeper is then woken and must come back without running the program.
 * Exit status: 0, or the step that failed (2 attach, 3 detach, 4 program ran after
 * detach, 5 no run before it). A deadlock is the parent's timeout. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utramp/utramp.h>

static int g_pipe[2];
static struct utramp_link *g_link;
static atomic_int g_detached, g_runs, g_late_runs, g_sleeper_back;
static pthread_t g_sleeper;
static int g_has_sleeper;
static int g_use_dtor;
static struct utramp_link *(*p_attach)(void *, enum utramp_attach_type, utramp_prog_t,
                                       const struct utramp_attach_opts *);
static int (*p_detach)(struct utramp_link *);
static const char *(*p_last_error)(void);

__attribute__((noinline)) long xd_work(long fd) {
  char c = 0;
  if (fd >= 0 && read((int)fd, &c, 1) != 1) c = 0;
  __asm__ volatile("" ::: "memory");
  return c + 1;
}

static uint64_t count_exit(uint64_t *ctx) {
  (void)ctx;
  if (atomic_load(&g_detached)) atomic_fetch_add(&g_late_runs, 1);
  atomic_fetch_add(&g_runs, 1);
  return 0;
}

static void *sleeper(void *arg) {
  (void)arg;
  xd_work(g_pipe[0]);
  atomic_store(&g_sleeper_back, 1);
  return NULL;
}

static void detach_now(void) {
  if (atomic_load(&g_runs) == 0) _exit(5);
  int rc = p_detach(g_link);
  if (rc != 0) {
    fprintf(stderr, "detach: %d %s\n", rc, p_last_error());
    _exit(3);
  }
  atomic_store(&g_detached, 1);
  if (g_has_sleeper) {
    if (write(g_pipe[1], "x", 1) != 1) _exit(6);
    pthread_join(g_sleeper, NULL);
  }
  xd_work(-1);
  if (atomic_load(&g_late_runs) != 0) _exit(4);
}

static void at_exit(void) {
  if (!g_use_dtor) detach_now();
}

__attribute__((destructor)) static void at_fini(void) {
  if (g_use_dtor && g_link) detach_now();
}

int main(int argc, char **argv) {
  if (argc < 3) return 1;
  g_use_dtor = strcmp(argv[2], "dtor") == 0;
  g_has_sleeper = argc > 3 && strcmp(argv[3], "sleeper") == 0;
  if (pipe(g_pipe) != 0) return 1;
  atexit(at_exit);  /* before libutramp loads: runs after its exit handler */
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  *(void **)&p_attach = dlsym(lib, "utramp_attach");
  *(void **)&p_detach = dlsym(lib, "utramp_link_detach");
  *(void **)&p_last_error = dlsym(lib, "utramp_last_error");
  if (!p_attach || !p_detach || !p_last_error) return 1;
  UTRAMP_OPTS(utramp_attach_opts, o, .signature = "i64 -> i64");
  g_link = p_attach((void *)&xd_work, UTRAMP_FEXIT, &count_exit, &o);
  if (!g_link) {
    fprintf(stderr, "attach: %s\n", p_last_error());
    return 2;
  }
  xd_work(-1);
  if (g_has_sleeper) {
    if (pthread_create(&g_sleeper, NULL, sleeper, NULL) != 0) return 1;
    usleep(20000);  /* let it block in read(), inside the image */
  }
  return 0;
}
