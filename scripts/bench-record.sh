#!/usr/bin/env bash
# Per-call overhead of function tracing: `utramp record` (function_graph, all functions)
# against the same program untraced, side by side with `uftrace record` and XRay
# (xray-basic mode), on bench/record_target.c (N calls of one tiny function).
#
#   ./scripts/bench-record.sh [N] [REPEATS]      (default 10000000 calls, best of 5)
#   UTRAMP_BENCH_FILTERS=1 ./scripts/bench-record.sh ...   also -F/-N/-D/--only rows
#
# Method: each tracer gets its own build of the target (its sites), and each build is
# timed untraced and traced, with N calls and with 0 calls. The fixed costs (start-up,
# patching, the recorder's set-up and final flush) cancel in the difference:
#
#   overhead/call = ((traced(N) - traced(0)) - (untraced(N) - untraced(0))) / N
#
# Wall time, best of REPEATS, traces written to a scratch directory on the same disk
# as /tmp. "B/call" is what the trace takes on disk per call: (size(N) - size(0)) / N,
# the trace directory as the tracer left it (utramp's events files plain, or zstd frames
# in the --compress zstd row). uftrace is installed from Debian (apt-get) if missing; XRay is measured when
# clang can link its runtime (libclang-rt-14-dev). Not a test: never run by ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10000000}
REPEATS=${2:-5}
. scripts/bench-common.sh  # BUILD, UTRAMP (built when missing)

if ! command -v uftrace >/dev/null; then
  echo "installing uftrace (Debian package)..." >&2
  if [ "$(id -u)" = 0 ]; then apt-get install -y -qq uftrace >/dev/null || true
  else sudo apt-get install -y -qq uftrace >/dev/null || true; fi
fi

WORK=$(mktemp -d /tmp/utramp-bench-record.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
SRC=bench/record_target.c
gcc -O2 -fcf-protection=none -fpatchable-function-entry=5 -o "$WORK/t_pfe" "$SRC"
gcc -O2 -fcf-protection=none -pg -o "$WORK/t_pg" "$SRC"
gcc -O2 -fcf-protection=none -o "$WORK/t_floor" bench/timestamp_floor.c
have_xray=0
if command -v clang >/dev/null &&
   clang -O2 -fcf-protection=none -fxray-instrument -fxray-instruction-threshold=1 \
     -o "$WORK/t_xray" "$SRC" 2>/dev/null; then
  have_xray=1
fi

now_ns() { date +%s%N; }
# best_ns CMD...: the fastest of REPEATS runs, in ns (each run in a fresh trace dir).
# The most events any of those runs lost (utramp's "N events lost") is left in
# $WORK/lost: a time measured while events were dropped is not the cost of recording
# them all, and is never reported without its loss.
best_ns() {
  local best=0 t0 t1 d i lost max_lost=0
  for ((i = 0; i < REPEATS; i++)); do
    rm -rf "$WORK/out" && mkdir -p "$WORK/out"
    t0=$(now_ns)
    (cd "$WORK/out" && "$@") >/dev/null 2>"$WORK/last.err" || true
    t1=$(now_ns)
    d=$((t1 - t0))
    if [ "$best" = 0 ] || [ "$d" -lt "$best" ]; then best=$d; fi
    lost=$(grep -Eo '[0-9]+ events lost' "$WORK/last.err" | head -1 | grep -Eo '^[0-9]+' || true)
    if [ -n "$lost" ] && [ "$lost" -gt "$max_lost" ]; then max_lost=$lost; fi
    du -sb "$WORK/out" | cut -f1 >"$WORK/bytes"  # the trace's size (runs differ little)
  done
  echo "$max_lost" >"$WORK/lost"
  echo "$best"
}

UT=$(realpath "$UTRAMP")
ms() { awk -v x="$1" 'BEGIN { printf "%.1f", x / 1e6 }'; }
declare -A per_call lost_of
row() {  # row NAME BUILD TRACED-CMD-PREFIX...
  local name=$1 bin=$2; shift 2
  local u0 uN t0 tN b0 bN
  u0=$(best_ns "$bin" 0); uN=$(best_ns "$bin" "$N")
  t0=$(best_ns "$@" "$bin" 0); b0=$(cat "$WORK/bytes")
  tN=$(best_ns "$@" "$bin" "$N"); bN=$(cat "$WORK/bytes")
  lost_of[$name]=$(cat "$WORK/lost")
  local extra=""
  [ "${lost_of[$name]}" != 0 ] && extra="LOST ${lost_of[$name]} events in a run: not a cost"
  per_call[$name]=$(awk -v a="$tN" -v b="$t0" -v c="$uN" -v d="$u0" -v n="$N" \
                      'BEGIN { printf "%.1f", ((a - b) - (c - d)) / n }')
  printf "%-28s %12s %12s %12s %12s %12s %8s  %s\n" "$name" "$(ms "$u0")" "$(ms "$uN")" \
    "$(ms "$t0")" "$(ms "$tN")" "${per_call[$name]}" \
    "$(awk -v a="$bN" -v b="$b0" -v n="$N" 'BEGIN { printf "%.2f", (a - b) / n }')" "$extra"
}

echo "# utramp record vs uftrace record vs XRay: per-call overhead, $N calls, best of $REPEATS"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs"
echo "# kernel: $(uname -r); $("$UT" --version 2>/dev/null | head -1 || echo utramp)"
printf "%-28s %12s %12s %12s %12s %12s %8s\n" "tracer (build)" "plain 0 ms" "plain N ms" \
  "traced 0 ms" "traced N ms" "ns/call" "B/call"
# The default ring (256 Ki records per thread), then a 4x larger one that absorbs the
# drain's hiccups when the machine is busy. Not a ring for the whole run: fresh pages
# cost microseconds each in a VM (a 1 GiB ring's first lap alone added ~35 ns per call
# here), which is not what a recording costs once its ring is warm.
row "utramp record (pfe)" "$WORK/t_pfe" "$UT" record -o "$WORK/out/utramp.data" --
# The same with the events files compressed by the recorder (zstd frames).
row "utramp record --compress zstd" "$WORK/t_pfe" "$UT" record -o "$WORK/out/utramp.data" \
  --compress zstd --
row "utramp record, 1 Mi ring" "$WORK/t_pfe" "$UT" record -o "$WORK/out/utramp.data" \
  --buffer-size 1048576 --max-threads 2 --
# Nothing lost by construction: the traced thread waits for the recorder when its ring
# is full (what every event costs when the recorder must keep up).
row "utramp record --mode block" "$WORK/t_pfe" "$UT" record -o "$WORK/out/utramp.data" \
  --mode block --
if command -v uftrace >/dev/null; then
  row "uftrace record (-pg)" "$WORK/t_pg" uftrace record -d "$WORK/out/uftrace.data"
else
  echo "uftrace: not installed (apt-get install uftrace), skipped"
fi
if [ "$have_xray" = 1 ]; then
  row "XRay xray-basic (clang)" "$WORK/t_xray" env \
    XRAY_OPTIONS="patch_premain=true xray_mode=xray-basic verbosity=0 xray_logfile_base=$WORK/out/xray-log."
else
  echo "XRay: clang cannot link an XRay program (libclang-rt-14-dev), skipped"
fi
# uftrace's filters (docs/tracing.md, "Filters"), with UTRAMP_BENCH_FILTERS=1: the thread
# CPU time of the traced loop (bench/record_target.c with RECORD_TARGET_CPU=1; the least
# of REPEATS runs), less the untraced loop's, per call: steadier than wall time on a busy
# machine, and without the recorder's work. Every function traced (the baseline, in the
# same run), every call inside a -F scope (main: the inline path as without filters), the
# same with -D (a per-thread depth limit: the C hooks), every call outside any scope (-F
# of a function never called: compared with the top frame, not recorded), the traced
# function itself named by -N or -F (its entry takes the general code), --only, and
# uftrace's rows for the same commands.
cpu_best() {  # cpu_best CMD...: the least loop CPU time of REPEATS runs, in ns
  local best=0 c i
  for ((i = 0; i < REPEATS; i++)); do
    rm -rf "$WORK/out" && mkdir -p "$WORK/out"
    c=$(cd "$WORK/out" && RECORD_TARGET_CPU=1 "$@" 2>&1 >/dev/null | grep -Eo 'cpu_ns [0-9]+' | cut -d' ' -f2)
    if [ "$best" = 0 ] || [ "$c" -lt "$best" ]; then best=$c; fi
  done
  echo "$best"
}
cpu_row() {  # cpu_row NAME BUILD TRACED-CMD-PREFIX...
  local name=$1 bin=$2; shift 2
  local u t
  u=$(cpu_best "$bin" "$N"); t=$(cpu_best "$@" "$bin" "$N")
  awk -v t="$t" -v u="$u" -v n="$N" -v k="$name" \
    'BEGIN { printf "%-36s %12.1f %12.1f %12.1f\n", k, u / 1e6, t / 1e6, (t - u) / n }'
}
if [ "${UTRAMP_BENCH_FILTERS:-0}" = 1 ]; then
  echo
  echo "# filters: thread CPU time of the loop, least of $REPEATS runs"
  printf "%-36s %12s %12s %12s\n" "command" "plain ms" "traced ms" "ns/call"
  U=("$UT" record -q -o "$WORK/out/utramp.data")
  cpu_row "utramp, every function" "$WORK/t_pfe" "${U[@]}" --
  cpu_row "utramp -F main" "$WORK/t_pfe" "${U[@]}" -F main --
  cpu_row "utramp -F main -D 8" "$WORK/t_pfe" "${U[@]}" -F main -D 8 --
  cpu_row "utramp -F never_called" "$WORK/t_pfe" "${U[@]}" -F never_called --
  cpu_row "utramp -N tiny" "$WORK/t_pfe" "${U[@]}" -N tiny --
  cpu_row "utramp -F tiny" "$WORK/t_pfe" "${U[@]}" -F tiny --
  cpu_row "utramp --only tiny" "$WORK/t_pfe" "${U[@]}" --only tiny --
  cpu_row "utramp, C hooks (no inline path)" "$WORK/t_pfe" env UTRAMP_NO_INLINE_TRACER=1 "${U[@]}" --
  if command -v uftrace >/dev/null; then
    cpu_row "uftrace, every function" "$WORK/t_pg" uftrace record -d "$WORK/out/uftrace.data"
    cpu_row "uftrace -F main" "$WORK/t_pg" uftrace record -d "$WORK/out/uftrace.data" -F main
    cpu_row "uftrace -N tiny" "$WORK/t_pg" uftrace record -d "$WORK/out/uftrace.data" -N tiny
    cpu_row "uftrace -F tiny" "$WORK/t_pg" uftrace record -d "$WORK/out/uftrace.data" -F tiny
  fi
  echo
fi
# The clocks' floor: the same loop with two clock reads around each call and nothing
# else (bench/timestamp_floor.c), against the plain loop. No function_graph tracer that
# times entry and exit with that clock can cost less per call.
floor_row() {  # floor_row NAME CLOCK
  local u0 uN f0 fN
  u0=$(best_ns "$WORK/t_pfe" 0); uN=$(best_ns "$WORK/t_pfe" "$N")
  f0=$(best_ns "$WORK/t_floor" 0 "$2"); fN=$(best_ns "$WORK/t_floor" "$N" "$2")
  per_call[$1]=$(awk -v a="$fN" -v b="$f0" -v c="$uN" -v d="$u0" -v n="$N" \
                   'BEGIN { printf "%.1f", ((a - b) - (c - d)) / n }')
  printf "%-28s %12s %12s %12s %12s %12s\n" "$1" "$(ms "$u0")" "$(ms "$uN")" \
    "$(ms "$f0")" "$(ms "$fN")" "${per_call[$1]}"
}
floor_row "floor: 2 rdtsc per call" tsc
floor_row "floor: 2 clock_gettime/call" clock
echo
# The per-call figure compared: the first utramp row that lost nothing in any run (the
# default ring, the larger one, block mode); if all lost, block mode's, said to be lossy.
ours=""
for k in "utramp record (pfe)" "utramp record, 1 Mi ring" "utramp record --mode block"; do
  if [ "${lost_of["$k"]:-1}" = 0 ]; then ours=$k; break; fi
done
note=""
if [ -z "$ours" ]; then
  ours="utramp record --mode block"
  note=" -- every utramp row lost events: the ratios below are NOT the cost of recording everything"
fi
echo "utramp figure used: $ours (lost: ${lost_of["$ours"]:-0})$note"
for k in "uftrace record (-pg)" "XRay xray-basic (clang)"; do
  if [ -n "${per_call[$k]:-}" ]; then
    awk -v u="${per_call[$ours]}" -v o="${per_call[$k]}" -v k="$k" -v l="${lost_of["$ours"]:-0}" \
      'BEGIN { printf "utramp / %s per-call cost: %.2f (goal against uftrace: <= 0.20)%s\n", k, u / o,
               l == 0 ? "" : sprintf(" [utramp lost %d events]", l) }'
  fi
done
if [ -n "${per_call["uftrace record (-pg)"]:-}" ]; then
  awk -v f="${per_call["floor: 2 rdtsc per call"]}" -v o="${per_call["uftrace record (-pg)"]}" \
    -v u="${per_call[$ours]}" 'BEGIN {
      printf "two rdtsc per call alone: %.1f ns = %.2f of uftrace; utramp is %.1f ns above that floor\n", f, f / o, u - f }'
fi
