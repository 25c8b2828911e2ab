#!/usr/bin/env bash
# Start-up cost of recording: `utramp record` against `uftrace record` of the same
# program, side by side in one run, on programs that do (almost) nothing: one of 3
# functions and one of COUNT functions (generated here: each a distinct tiny function,
# all reachable through a table so none is dropped). What is measured is the whole
# command's wall time: loading the agent, finding sites, reading symbols and DWARF,
# patching, the recorder's polling and final drain, the process's exit. Beside it, the
# CPU time (user + system) of the command and of everything it waited for (the traced
# program included), and its minor page faults (getrusage of the children, read by a
# few lines of python3 that also time the command): on a shared machine
# the wall time mostly measures the wait for a CPU, the CPU time what was done.
#
#   ./scripts/bench-startup.sh [COUNT] [REPEATS]     (default 5000 functions, best of 7)
#
# Each tracer gets its own build (its sites): -fpatchable-function-entry=5 for utramp,
# -pg for uftrace; both -O2 -g. Times are the best of REPEATS runs (each column's least
# on its own), traces in a scratch directory. Not a test: never run by ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-5000}
REPEATS=${2:-7}
. scripts/bench-common.sh  # BUILD, UTRAMP (built when missing)
UT=$(realpath "$UTRAMP")
have_uftrace=1
command -v uftrace >/dev/null || have_uftrace=0
# The system's python3: a version manager's shim (pyenv) would run as its child, and
# its CPU time would count as the command's.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3) || { echo "needs python3" >&2; exit 1; }

WORK=$(mktemp -d /tmp/utramp-bench-startup.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

cat >"$WORK/three.c" <<'C'
__attribute__((noinline)) int a(int x) { return x + 1; }
__attribute__((noinline)) int b(int x) { return a(x) * 2; }
int main(void) { return b(1) == 0; }
C
many_functions "$COUNT" >"$WORK/many.c"
for p in three many; do
  gcc -O2 -g -fcf-protection=none -fpatchable-function-entry=5 -o "$WORK/${p}_pfe" "$WORK/$p.c"
  gcc -O2 -g -fcf-protection=none -pg -o "$WORK/${p}_pg" "$WORK/$p.c"
done

# best CMD...: "WALL CPU FAULTS" of REPEATS runs, each the least seen: wall and CPU
# (user + system) in ms, minor page faults.
best() {
  local bw=0 bc=0 bf=0 d c f i
  for ((i = 0; i < REPEATS; i++)); do
    rm -rf "$WORK/out" && mkdir -p "$WORK/out"
    # Prints "WALL_NS CPU_NS MINOR_FAULTS" of the command and what it waited for.
    read -r d c f < <(cd "$WORK/out" && "$PY" -c '
import resource, subprocess, sys, time
t0 = time.monotonic_ns()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
wall = time.monotonic_ns() - t0
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(wall, int((r.ru_utime + r.ru_stime) * 1e9), r.ru_minflt)' "$@")
    if [ "$bw" = 0 ] || [ "$d" -lt "$bw" ]; then bw=$d; fi
    if [ "$bc" = 0 ] || [ "$c" -lt "$bc" ]; then bc=$c; fi
    if [ "$bf" = 0 ] || [ "$f" -lt "$bf" ]; then bf=$f; fi
  done
  awk -v w="$bw" -v c="$bc" -v f="$bf" 'BEGIN { printf "%.1f %.1f %d", w / 1e6, c / 1e6, f }'
}

echo "# start-up: utramp record vs uftrace record of a program that does nothing, best of $REPEATS"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# kernel: $(uname -r); uftrace: $( [ $have_uftrace = 1 ] && uftrace --version 2>/dev/null | head -1 || echo not installed)"
printf "%-16s %9s %24s %24s %7s %7s\n" "program" "plain ms" "utramp ms/cpu ms/faults" \
  "uftrace ms/cpu ms/faults" "wall" "cpu"
for p in three many; do
  name=$p
  [ "$p" = three ] && name="3 functions" || name="$COUNT functions"
  read -r plain _ _ <<<"$(best "$WORK/${p}_pfe")"
  read -r uw uc uflt <<<"$(best "$UT" record -q -o "$WORK/out/utramp.data" -- "$WORK/${p}_pfe")"
  if [ $have_uftrace = 1 ]; then
    read -r fw fc fflt <<<"$(best uftrace record -d "$WORK/out/uftrace.data" "$WORK/${p}_pg")"
    rw=$(awk -v a="$uw" -v b="$fw" 'BEGIN { printf "%.2f", a / b }')
    rc=$(awk -v a="$uc" -v b="$fc" 'BEGIN { printf "%.2f", b ? a / b : 0 }')
    theirs="$fw / $fc / $fflt"
  else
    theirs="-"; rw="-"; rc="-"
  fi
  printf "%-16s %9s %24s %24s %7s %7s\n" "$name" "$plain" "$uw / $uc / $uflt" "$theirs" "$rw" "$rc"
done
echo "wall, cpu: utramp / uftrace (goal: <= 1); cpu is the command's and its children's user + system time"
