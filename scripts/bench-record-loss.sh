#!/usr/bin/env bash
# Does the recorder keep up on a busy machine? `utramp record` and `uftrace record` of
# bench/record_target.c (N calls of one tiny function: 2 N events) while a busy loop,
# started and stopped by this script, holds the last CPU (`taskset`), as another
# process would. Per configuration, REPEATS runs each:
#
#   events   the events the trace holds (utramp: record's summary; uftrace: its data
#            files' size / 16 bytes per record)
#   lost     events the run lost: utramp's own count ("N events lost"); uftrace's, the
#            2 N + 2 expected less those it holds
#   B/event  the trace directory's size per event held
#   slowdown the run's wall time against the untraced program's (best of REPEATS each)
#
# Every run's loss is printed beside the time: a time measured while events were
# dropped is not the cost of recording them all.
#
#   ./scripts/bench-record-loss.sh [N] [REPEATS] [idle]  (default 5000000 calls, 3 runs)
#
# `idle` as third argument: no busy loop (the machine as quiet as it is). Not a test:
# never run by ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-5000000}
REPEATS=${2:-3}
MODE=${3:-busy}
BUILD=${UTRAMP_BUILD:-build}
UT=$(realpath "${UTRAMP:-$BUILD/tools/utramp/utramp}")  # UTRAMP=PATH: another build's CLI
[ -x "$UT" ] || { echo "build utramp first ($BUILD/tools/utramp/utramp)" >&2; exit 1; }

WORK=$(mktemp -d /tmp/utramp-bench-loss.XXXXXX)
BUSY_PID=""
cleanup() {
  if [ -n "$BUSY_PID" ]; then kill "$BUSY_PID" 2>/dev/null || true; wait "$BUSY_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
gcc -O2 -fcf-protection=none -fpatchable-function-entry=5 -o "$WORK/t_pfe" bench/record_target.c
gcc -O2 -fcf-protection=none -pg -o "$WORK/t_pg" bench/record_target.c

CPUS=$(nproc)
if [ "$MODE" = busy ]; then
  # A process of its own burning the last CPU for the whole benchmark.
  taskset -c $((CPUS - 1)) bash -c 'while :; do :; done' &
  BUSY_PID=$!
fi

now_ns() { date +%s%N; }
ms() { awk -v x="$1" 'BEGIN { printf "%.1f", x / 1e6 }'; }
best_plain() {  # the untraced program's best wall time, in ns
  local best=0 t0 d i
  for ((i = 0; i < REPEATS; i++)); do
    t0=$(now_ns); (cd "$WORK" && "$1" "$N"); d=$(($(now_ns) - t0))  # -pg writes gmon.out there
    if [ "$best" = 0 ] || [ "$d" -lt "$best" ]; then best=$d; fi
  done
  echo "$best"
}
plain_pfe=$(best_plain "$WORK/t_pfe")
plain_pg=$(best_plain "$WORK/t_pg")
expected=$((2 * N + 2))

echo "# recording bench/record_target.c, $N calls ($expected events), $REPEATS runs per row"
echo "# $UT"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $CPUS CPUs; kernel $(uname -r)"
if [ "$MODE" = busy ]; then
  echo "# a busy loop (pid $BUSY_PID) holds CPU $((CPUS - 1)) throughout"
else
  echo "# no busy loop; load average $(cut -d' ' -f1-3 /proc/loadavg)"
fi
echo "# untraced: $(ms "$plain_pfe") ms (pfe build), $(ms "$plain_pg") ms (-pg build), best of $REPEATS"
printf "%-34s %5s %10s %10s %7s %8s %9s\n" "configuration" "run" "events" "lost" "lost%" "B/event" "slowdown"

# row NAME KIND PLAIN-NS CMD...: KIND utramp|uftrace.
row() {
  local name=$1 kind=$2 plain=$3; shift 3
  local i t0 d events lost bytes
  for ((i = 1; i <= REPEATS; i++)); do
    rm -rf "$WORK/out" && mkdir -p "$WORK/out"
    t0=$(now_ns)
    (cd "$WORK/out" && "$@") >/dev/null 2>"$WORK/err" || true
    d=$(($(now_ns) - t0))
    if [ "$kind" = utramp ]; then
      events=$(grep -Eo '[0-9]+ events recorded' "$WORK/err" | head -1 | grep -Eo '^[0-9]+' || echo 0)
      lost=$(grep -Eo '[0-9]+ events lost' "$WORK/err" | head -1 | grep -Eo '^[0-9]+' || echo 0)
    else
      events=$(($(cat "$WORK"/out/uftrace.data/*.dat 2>/dev/null | wc -c) / 16))
      lost=$((expected > events ? expected - events : 0))
    fi
    bytes=$(du -sb "$WORK/out" | cut -f1)
    printf "%-34s %5s %10s %10s %7s %8s %9s\n" "$name" "$i" "$events" "$lost" \
      "$(awk -v l="$lost" -v e="$expected" 'BEGIN { printf "%.2f", 100 * l / e }')" \
      "$(awk -v b="$bytes" -v e="$events" 'BEGIN { printf "%.2f", e ? b / e : 0 }')" \
      "$(awk -v d="$d" -v p="$plain" 'BEGIN { printf "%.2f", d / p }')"
  done
}

row "utramp record (default: block)" utramp "$plain_pfe" "$UT" record -o "$WORK/out/u" -- "$WORK/t_pfe" "$N"
row "utramp record --compress none" utramp "$plain_pfe" "$UT" record -o "$WORK/out/u" --compress none -- "$WORK/t_pfe" "$N"
row "utramp record --compress zstd" utramp "$plain_pfe" "$UT" record -o "$WORK/out/u" --compress zstd -- "$WORK/t_pfe" "$N"
# The modes that may drop when the recorder falls behind (the default, block, never
# does while the recorder runs): the default ring, and a larger one.
row "utramp record --mode discard" utramp "$plain_pfe" "$UT" record -o "$WORK/out/u" --mode discard -- "$WORK/t_pfe" "$N"
row "utramp record --mode discard, 1Mi" utramp "$plain_pfe" "$UT" record -o "$WORK/out/u" --mode discard --buffer-size 1048576 -- "$WORK/t_pfe" "$N"
if command -v uftrace >/dev/null; then
  row "uftrace record (-pg)" uftrace "$plain_pg" uftrace record -d "$WORK/out/uftrace.data" "$WORK/t_pg" "$N"
else
  echo "uftrace: not installed (apt-get install uftrace), skipped"
fi
