/* An outside program using the installed library through pkg-config: sites, the batch
 * attach with option structs, the ctx readers, link info and the list, fmod_ret,
 * freplace, detach (and freeing the programs' state right after it), the refusals. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utramp/utramp.h>

__attribute__((noinline)) int64_t c_add(int64_t a, int64_t b) { return a + b; }
__attribute__((noinline)) int c_check(int x) { return x * 2; }
UTRAMP_ALLOW_ERROR_INJECTION(c_check);
__attribute__((noinline)) int c_replacement(int x) { return -x; }

/* Called through volatile pointers: the compiler may neither inline nor fold them. */
static int64_t (*volatile add_fn)(int64_t, int64_t) = c_add;
static int (*volatile check_fn)(int) = c_check;

struct state {
  uint64_t runs;
  int entry_ret_rc;
  uint64_t exit_ret;
};

static struct state *state_of(const uint64_t *ctx) {
  return (struct state *)(uintptr_t)utramp_get_attach_cookie(ctx);
}

static uint64_t on_entry(uint64_t *ctx) {
  uint64_t v;
  state_of(ctx)->entry_ret_rc = utramp_get_func_ret(ctx, &v);
  state_of(ctx)->runs++;
  return 0;
}

static uint64_t on_exit(uint64_t *ctx) {
  utramp_get_func_ret(ctx, &state_of(ctx)->exit_ret);
  state_of(ctx)->runs++;
  return 0;
}

static uint64_t inject(uint64_t *ctx) {
  uint64_t x = 0;
  utramp_get_func_arg(ctx, 0, &x);
  return x == 7 ? (uint64_t)(int64_t)-5 : 0;
}

static int count_site(const struct utramp_site_info *info, void *arg) {
  (void)info;
  ++*(int *)arg;
  return 0;
}

static int count_link(const struct utramp_link_info *info, void *arg) {
  if (info->type == UTRAMP_FENTRY || info->type == UTRAMP_FEXIT) ++*(int *)arg;
  return 0;
}

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "%s:%d: %s failed (%s)\n", __FILE__, __LINE__, #cond,           \
              utramp_last_error());                                                   \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

int main(void) {
  CHECK(strcmp(utramp_version(), "") != 0);
  int n = utramp_sites_discover();
  CHECK(n > 0);
  int seen = 0;
  utramp_sites_foreach("main", count_site, &seen);
  CHECK(seen == 1);

  struct state *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  UTRAMP_OPTS(utramp_attach_opts, opts, .cookie = (uint64_t)(uintptr_t)s,
              .signature = "i64,i64 -> i64");
  struct utramp_attach_req reqs[2] = {
      {.func = (void *)c_add, .type = UTRAMP_FENTRY, .prog = on_entry, .opts = &opts},
      {.func = (void *)c_add, .type = UTRAMP_FEXIT, .prog = on_exit, .opts = &opts},
  };
  CHECK(utramp_attach_batch(reqs, 2) == 2);
  CHECK(add_fn(40, 2) == 42);
  CHECK(s->runs == 2);
  CHECK(s->entry_ret_rc == -EOPNOTSUPP);
  CHECK(s->exit_ret == 42);

  UTRAMP_OPTS(utramp_link_info, info);
  CHECK(utramp_link_get_info(reqs[1].link, &info) == 0);
  CHECK(info.type == UTRAMP_FEXIT && strcmp(info.func_name, "c_add") == 0);
  CHECK(info.prog == on_exit && info.cookie == (uint64_t)(uintptr_t)s);
  int links = 0;
  CHECK(utramp_links_foreach(count_link, &links) == 2 && links == 2);

  struct utramp_link *mod = utramp_attach_name("c_check", UTRAMP_FMOD_RET, inject, NULL);
  CHECK(mod != NULL);
  CHECK(check_fn(7) == -5 && check_fn(3) == 6);

  /* Detach returns once no program of the link runs: the state may go at once. */
  CHECK(utramp_link_detach(reqs[0].link) == 0);
  CHECK(utramp_link_detach(reqs[1].link) == 0);
  free(s);
  CHECK(add_fn(1, 2) == 3);
  CHECK(utramp_link_detach(mod) == 0);

  struct utramp_link *rep = utramp_attach_replace((void *)c_check, (void *)c_replacement, NULL);
  CHECK(rep != NULL);
  CHECK(check_fn(3) == -3);
  CHECK(utramp_link_detach(rep) == 0);
  CHECK(check_fn(3) == 6);

  CHECK(utramp_attach(NULL, UTRAMP_FENTRY, on_entry, NULL) == NULL && errno == EINVAL);
  CHECK(utramp_attach((void *)c_add, UTRAMP_FREPLACE, on_entry, NULL) == NULL && errno == EINVAL);
  CHECK(utramp_link_detach(NULL) == -EINVAL);
  CHECK(utramp_get_func_arg(NULL, 0, NULL) == -EINVAL);

  printf("utramp %s: %d sites, main found %d time(s); links attached, listed, detached\n",
         utramp_version(), n, seen);
  return 0;
}
