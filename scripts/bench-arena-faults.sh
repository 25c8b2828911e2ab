#!/usr/bin/env bash
# What the executable arena's ways of making fresh memory present cost on this machine
# (src/os/exec_memory.hpp): 2 MiB of new anonymous memory filled with int3 and sealed
# read+exec, as a huge chunk is, made present
#   small:    by a page fault per 4 KiB (the plain memset a small chunk did before),
#   populate: by one madvise(MADV_POPULATE_WRITE) before the memset (a small chunk's
#             fill steps now),
#   huge:     by one fault of a transparent huge page (madvise(MADV_HUGEPAGE) on a
#             2 MiB-aligned region: a huge chunk now).
# The three are interleaved round by round in one process; per round each gets fresh
# memory. Prints the median ms of each and its ratio to `small`, with the page-fault
# exceptions of each (perf's software event; getrusage would count populated pages too).
#
#   ./scripts/bench-arena-faults.sh [ROUNDS]      (default 15)
#
# Not a test: never run by ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-15}
WORK=$(mktemp -d /tmp/utramp-bench-arena.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cat >"$WORK/faults.c" <<'C'
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { kSize = 2 << 20, kWays = 3 };
static const char* const kNames[kWays] = {"small", "populate", "huge"};

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}
static uint64_t read_counter(int fd) {
  uint64_t v = 0;
  if (fd >= 0 && read(fd, &v, sizeof v) != sizeof v) v = 0;
  return v;
}

// One fill of fresh memory the WAY way: its ms; *faults: the exceptions taken.
static double once(int way, int fd, uint64_t* faults) {
  char* raw = mmap(NULL, 2 * kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) { perror("mmap"); exit(1); }
  char* p = (char*)(((uintptr_t)raw + kSize - 1) & ~(uintptr_t)(kSize - 1));
  const uint64_t f0 = read_counter(fd);
  const double t0 = now_ms();
  if (way == 2) madvise(p, kSize, MADV_HUGEPAGE);
  if (way == 1) madvise(p, kSize, MADV_POPULATE_WRITE);
  memset(p, 0xcc, kSize);
  mprotect(p, kSize / 2, PROT_READ | PROT_EXEC);  // sealed in part, as a chunk is
  const double ms = now_ms() - t0;
  *faults = read_counter(fd) - f0;
  munmap(raw, 2 * kSize);
  return ms;
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 15;
  struct perf_event_attr pe;
  memset(&pe, 0, sizeof pe);
  pe.type = PERF_TYPE_SOFTWARE;
  pe.size = sizeof pe;
  pe.config = PERF_COUNT_SW_PAGE_FAULTS;
  const int fd = (int)syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0);
  double* ms[kWays];
  uint64_t faults[kWays] = {0};
  for (int w = 0; w < kWays; ++w) ms[w] = calloc((size_t)rounds, sizeof(double));
  for (int r = 0; r < rounds; ++r)
    for (int w = 0; w < kWays; ++w) ms[w][r] = once(w, fd, &faults[w]);
  double med[kWays];
  for (int w = 0; w < kWays; ++w) {
    qsort(ms[w], (size_t)rounds, sizeof(double), cmp);
    med[w] = ms[w][rounds / 2];
  }
  printf("%-10s %10s %10s %14s\n", "way", "median ms", "vs small", "faults (last)");
  for (int w = 0; w < kWays; ++w) {
    printf("%-10s %10.2f %10.2f ", kNames[w], med[w], med[w] / med[0]);
    if (fd >= 0) printf("%14llu\n", (unsigned long long)faults[w]);
    else printf("%14s\n", "n/a");
  }
  return 0;
}
C
gcc -O2 -o "$WORK/faults" "$WORK/faults.c"
echo "# 2 MiB of fresh memory filled with int3 and half sealed, $ROUNDS interleaved rounds"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# kernel: $(uname -r); transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown)"
"$WORK/faults" "$ROUNDS"
