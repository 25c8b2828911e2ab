/* An outside program using the installed library through pkg-config. */
#include <stdio.h>
#include <string.h>
#include <utramp/utramp.h>

static int count(const struct utramp_site_info *info, void *arg) {
  (void)info;
  ++*(int *)arg;
  return 0;
}

int main(void) {
  if (strcmp(utramp_version(), "") == 0) return 1;
  int n = utramp_sites_discover();
  if (n <= 0) {
    fprintf(stderr, "discover: %d %s\n", n, utramp_last_error());
    return 1;
  }
  int seen = 0;
  utramp_sites_foreach("main", count, &seen);
  printf("utramp %s: %d sites, main found %d time(s)\n", utramp_version(), n, seen);
  return seen == 1 ? 0 : 1;
}
