#!/usr/bin/env bash
# Start-up cost of recording: `utramp record` against `uftrace record` of the same
# program, side by side in one run, on programs that do (almost) nothing: one of 3
# functions and one of COUNT functions (generated here: each a distinct tiny function,
# all reachable through a table so none is dropped). What is measured is the whole
# command's wall time: loading the agent, finding sites, reading symbols and DWARF,
# patching, the recorder's polling and final drain, the process's exit.
#
#   ./scripts/bench-startup.sh [COUNT] [REPEATS]     (default 5000 functions, best of 7)
#
# Each tracer gets its own build (its sites): -fpatchable-function-entry=5 for utramp,
# -pg for uftrace; both -O2 -g. Times are the best of REPEATS runs (wall clock), traces
# in a scratch directory. Not a test: never run by ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-5000}
REPEATS=${2:-7}
BUILD=${UTRAMP_BUILD:-build}
UTRAMP=$BUILD/tools/utramp/utramp
if [ ! -x "$UTRAMP" ] || [ ! -e "$BUILD/src/libutramp-agent.so" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$BUILD" --target utramp_cli utramp_agent
fi
UT=$(realpath "$UTRAMP")
have_uftrace=1
command -v uftrace >/dev/null || have_uftrace=0

WORK=$(mktemp -d /tmp/utramp-bench-startup.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

cat >"$WORK/three.c" <<'C'
__attribute__((noinline)) int a(int x) { return x + 1; }
__attribute__((noinline)) int b(int x) { return a(x) * 2; }
int main(void) { return b(1) == 0; }
C
{
  for ((i = 0; i < COUNT; i++)); do
    echo "__attribute__((noinline)) int fn_$i(int x) { return x ^ $((i + 1)); }"
  done
  echo "int (*const tab[])(int) = {"
  for ((i = 0; i < COUNT; i++)); do echo "  fn_$i,"; done
  echo "};"
  echo "int main(void) { int x = 0; for (int i = 0; i < 3; ++i) x = tab[i](x); return x == -1; }"
} >"$WORK/many.c"
for p in three many; do
  gcc -O2 -g -fcf-protection=none -fpatchable-function-entry=5 -o "$WORK/${p}_pfe" "$WORK/$p.c"
  gcc -O2 -g -fcf-protection=none -pg -o "$WORK/${p}_pg" "$WORK/$p.c"
done

# best_ms CMD...: the fastest of REPEATS runs, in ms.
best_ms() {
  local best=0 t0 t1 d i
  for ((i = 0; i < REPEATS; i++)); do
    rm -rf "$WORK/out" && mkdir -p "$WORK/out"
    t0=$(date +%s%N)
    (cd "$WORK/out" && "$@") >/dev/null 2>&1 || true
    t1=$(date +%s%N)
    d=$((t1 - t0))
    if [ "$best" = 0 ] || [ "$d" -lt "$best" ]; then best=$d; fi
  done
  awk -v x="$best" 'BEGIN { printf "%.1f", x / 1e6 }'
}

echo "# start-up: utramp record vs uftrace record of a program that does nothing, best of $REPEATS"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# kernel: $(uname -r); uftrace: $( [ $have_uftrace = 1 ] && uftrace --version 2>/dev/null | head -1 || echo not installed)"
printf "%-22s %10s %14s %14s %10s\n" "program" "plain ms" "utramp ms" "uftrace ms" "ratio"
for p in three many; do
  name=$p
  [ "$p" = three ] && name="3 functions" || name="$COUNT functions"
  plain=$(best_ms "$WORK/${p}_pfe")
  ut=$(best_ms "$UT" record -q -o "$WORK/out/utramp.data" -- "$WORK/${p}_pfe")
  if [ $have_uftrace = 1 ]; then
    uf=$(best_ms uftrace record -d "$WORK/out/uftrace.data" "$WORK/${p}_pg")
    ratio=$(awk -v a="$ut" -v b="$uf" 'BEGIN { printf "%.2f", a / b }')
  else
    uf="-"; ratio="-"
  fi
  printf "%-22s %10s %14s %14s %10s\n" "$name" "$plain" "$ut" "$uf" "$ratio"
done
echo "ratio: utramp / uftrace wall time (goal: <= 1)"
