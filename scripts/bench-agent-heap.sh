#!/usr/bin/env bash
# The agent's heap at start-up: the peak of live heap bytes in a traced program of COUNT
# functions that does nothing (scripts/bench-startup.sh's), while `utramp record`
# starts it. A small library preloaded into the CLI (and, through its LD_PRELOAD, into
# the program, before the agent) counts the bytes of every live malloc/calloc/realloc
# block (malloc_usable_size) and writes, when the process ends, its peak and its minor
# faults; only the program's line is kept. The program itself allocates nothing, so
# what is counted is the agent's. One build, or two interleaved run by run:
#
#   UTRAMP_BUILD=build [BASE_BUILD=build-main] ./scripts/bench-agent-heap.sh [COUNT] [RUNS]
#
# (defaults 1000 functions, 3 runs of each): each run's figures. Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-1000}
RUNS=${2:-3}
. scripts/bench-common.sh  # BUILD, UTRAMP (built when missing)
BASE=${BASE_BUILD:-}
if [ -n "$BASE" ] && [ ! -x "$BASE/tools/utramp/utramp" ]; then
  echo "no $BASE/tools/utramp/utramp" >&2
  exit 1
fi

WORK=$(mktemp -d /tmp/utramp-bench-heap.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
many_functions "$COUNT" >"$WORK/many.c"
gcc -O2 -g -fcf-protection=none -fpatchable-function-entry=5 -o "$WORK/many_pfe" "$WORK/many.c"
cat >"$WORK/heappeak.c" <<'C'
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void __libc_free(void*);
static long live, peak;  // the agent's start-up runs on one thread
static void note(void* p) {
  if (!p) return;
  live += (long)malloc_usable_size(p);
  if (live > peak) peak = live;
}
void* malloc(size_t n) { void* p = __libc_malloc(n); note(p); return p; }
void* calloc(size_t a, size_t b) { void* p = __libc_calloc(a, b); note(p); return p; }
void* realloc(void* q, size_t n) {
  if (q) live -= (long)malloc_usable_size(q);
  void* p = __libc_realloc(q, n);
  note(p);
  return p;
}
void free(void* p) {
  if (p) live -= (long)malloc_usable_size(p);
  __libc_free(p);
}
__attribute__((destructor)) static void report(void) {
  const char* out = getenv("HEAPPEAK_OUT");
  char exe[256] = "";
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (!out || n <= 0 || !strstr(exe, "many_pfe")) return;
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  FILE* f = fopen(out, "a");
  if (!f) return;
  fprintf(f, "%ld %ld\n", peak, r.ru_minflt);
  fclose(f);
}
C
gcc -O2 -shared -fPIC -o "$WORK/heappeak.so" "$WORK/heappeak.c"

# one BUILD: "PEAK_BYTES MINOR_FAULTS" of the traced program
one() {
  rm -rf "$WORK/out" "$WORK/line"
  HEAPPEAK_OUT="$WORK/line" LD_PRELOAD="$WORK/heappeak.so" \
    "$1/tools/utramp/utramp" record -q -o "$WORK/out" -- "$WORK/many_pfe" >/dev/null 2>&1 || true
  cat "$WORK/line" 2>/dev/null || echo "? ?"
}
echo "# the traced program's peak live heap bytes and minor faults, $COUNT functions; load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %-40s %12s %8s\n' run build peak_bytes faults
for ((i = 1; i <= RUNS; i++)); do
  for b in ${BASE:+"$BASE"} "$BUILD"; do
    read -r peak faults < <(one "$b")
    printf '%-5s %-40s %12s %8s\n' "$i" "$b" "$peak" "$faults"
  done
done
