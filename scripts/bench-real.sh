#!/usr/bin/env bash
# A real program, built from its Debian source package, recorded by utramp and by uftrace
# side by side (issue 17's benchmark of a real workload): jq, Debian 12's `jq` source
# (`apt-get source jq`), an interpreter of its own language, running its own test suite
# (`jq --run-tests FILE`, what its `make check` runs for each test file), and a short run
# (`jq -n 1`: jq compiles its builtin library, written in its own language, at every
# start: 6.5 million calls in 30 ms, a short test file's cost in the issue's terms).
#
#   ./scripts/bench-real.sh [REPEATS] [TEST-FILES]   (default 3 runs per row;
#                                                    tests "base64")
#
# The test files are jq's tests/NAME.test. jq 1.6 compiles its builtin library in its own
# language for every test program, so jq.test (340 programs) makes about 2,000 million
# calls in 10 s untraced: recorded whole, 70 GB of trace for either tracer. base64.test
# makes about 290 million events in 0.3 s untraced (4.6 GB of uftrace trace), onig.test
# about 450 million.
#
# jq is built three times with Debian's own build flags (`dpkg-buildflags`, with the
# hardening=+all its debian/rules asks for): as Debian builds it (the baseline), and once
# for each tracer's sites: `-fpatchable-function-entry=5` for utramp, `-pg` for uftrace
# (its default build; untraced, a -pg build pays for glibc's mcount on every call).
# Both link libjq statically (`--disable-shared`: Debian ships it as libjq.so.1; one
# binary keeps the two tracers' scope the same without --libs). Each tracer records at
# its default settings (function_graph, library calls included), into a scratch
# directory on the same disk as /tmp. Per row, REPEATS runs:
#
#   wall ms, cpu ms  the least of the runs: wall time, and user + system time of the
#                    command and everything it waited for (traced program included)
#   slowdown         wall against the baseline build's untraced run, least against least
#                    (the same denominator for both tracers)
#   events           events the trace holds (utramp: record's summary; uftrace: its
#                    data files' size / 16 bytes per record)
#   lost             events lost, as utramp's record reports them; uftrace's are not
#                    counted here (only its replay or dump tells, which take minutes over
#                    gigabytes): compare its events with utramp's, same functions and calls
#   B/event          the trace directory's size per event
#   output           the traced run's output against the untraced one's: "same" or "DIFFERS"
#
# Needs root or sudo the first time: it adds a deb-src entry for the system's own suites
# when `apt-get source` has none, and installs jq's build dependencies (autoconf,
# automake, libtool, bison, flex, libonig-dev) and uftrace. Not a test: never run by ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS=${1:-3}
read -r -a TEST_FILES <<<"${2:-base64}"
. scripts/bench-common.sh  # BUILD, UTRAMP (built when missing)
UT=$(realpath "$UTRAMP")
PY=/usr/bin/python3  # the system's: a version manager's shim would be timed as a child
[ -x "$PY" ] || PY=$(command -v python3) || { echo "needs python3" >&2; exit 1; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

WORK=$(mktemp -d /tmp/utramp-bench-real.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# --- the source package ------------------------------------------------------------
# A deb-src entry for the suites the system installs from (deb822 or one-line form),
# only when apt has none that serves jq.
if ! (cd "$WORK" && apt-get source --print-uris jq >/dev/null 2>&1) ||
   [ -z "$(cd "$WORK" && apt-get source --print-uris jq 2>/dev/null | grep -F .dsc)" ]; then
  echo "adding a deb-src entry for the system's suites (/etc/apt/sources.list.d/utramp-deb-src.sources)" >&2
  src=""
  if [ -e /etc/apt/sources.list.d/debian.sources ]; then
    src=$(awk 'BEGIN { RS = ""; ORS = "\n\n" } /(^|\n)Types:[ \t]*deb[ \t\n]/ { sub(/Types:[^\n]*/, "Types: deb-src"); print }' \
      /etc/apt/sources.list.d/debian.sources)
  else
    src=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | sed 's/^deb /deb-src /' || true)
  fi
  [ -n "$src" ] || { echo "no Debian source list found to mirror as deb-src" >&2; exit 1; }
  if [ -e /etc/apt/sources.list.d/debian.sources ]; then
    printf '%s\n' "$src" | as_root tee /etc/apt/sources.list.d/utramp-deb-src.sources >/dev/null
  else
    printf '%s\n' "$src" | as_root tee /etc/apt/sources.list.d/utramp-deb-src.list >/dev/null
  fi
  as_root apt-get update -qq
fi
need=()
for p in autoconf automake libtool bison flex libonig-dev dpkg-dev uftrace; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} (Debian packages)..." >&2
  as_root apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The newest source version a mirror serves (one may list a security update whose pool
# it does not carry).
for v in $(apt-cache showsrc jq | awk '/^Version:/ { print $2 }' | sort -rV); do
  if (cd "$WORK" && apt-get source -qq "jq=$v" >/dev/null 2>&1); then break; fi
  echo "apt-get source jq=$v failed; trying an older version" >&2
  rm -rf "$WORK"/jq[-_]*
done
SRC=$(find "$WORK" -maxdepth 1 -type d -name 'jq-*' | head -1)
[ -n "$SRC" ] || { echo "apt-get source jq gave no source tree" >&2; exit 1; }
VERSION=$(cd "$SRC" && dpkg-parsechangelog -S Version)
(cd "$SRC" && autoreconf -fi >/dev/null 2>&1)

# build NAME EXTRA-CFLAGS: the jq binary, with Debian's flags and EXTRA-CFLAGS.
build() {
  local name=$1 extra=$2 dir="$WORK/build-$1"
  local cflags cppflags ldflags
  cflags=$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --get CFLAGS)
  cppflags=$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --get CPPFLAGS)
  ldflags=$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --get LDFLAGS)
  cp -a "$SRC" "$dir"  # in the tree: jq 1.6 does not build out of it (src/builtin.inc)
  (cd "$dir" && ./configure -q --disable-docs --disable-shared --disable-maintainer-mode \
      CFLAGS="$cflags $extra" CPPFLAGS="$cppflags" LDFLAGS="$ldflags" >/dev/null &&
    make -s -j"$(nproc)" >/dev/null 2>&1)  # all: jq alone skips BUILT_SOURCES
  cp "$dir/jq" "$WORK/jq_$name"
}
echo "building jq $VERSION three times with Debian's flags (as is, -fpatchable-function-entry=5, -pg)..." >&2
build plain ""
build pfe "-fpatchable-function-entry=5"
build pg "-pg"

# --- measuring ---------------------------------------------------------------------
# measure CMD...: runs CMD in $WORK/out (fresh), stdout to $WORK/stdout, stderr to
# $WORK/stderr; prints "WALL_NS CPU_NS".
measure() {
  rm -rf "$WORK/out" && mkdir -p "$WORK/out"
  (cd "$WORK/out" && "$PY" -c '
import resource, subprocess, sys, time
t0 = time.monotonic_ns()
with open(sys.argv[1], "wb") as out, open(sys.argv[2], "wb") as err:
    subprocess.run(sys.argv[3:], stdout=out, stderr=err, cwd="'"$SRC"'")
wall = time.monotonic_ns() - t0
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(wall, int((r.ru_utime + r.ru_stime) * 1e9))' "$WORK/stdout" "$WORK/stderr" "$@")
}

# The untraced runs: the output every traced run is compared with, and the baseline.
declare -A PLAIN
# plain NAME CMD...: least wall ns of REPEATS untraced runs, output kept as $WORK/NAME.expected.
plain() {
  local name=$1; shift
  local best=0 w c i
  for ((i = 0; i < REPEATS; i++)); do
    read -r w c < <(measure "$@")
    if [ "$best" = 0 ] || [ "$w" -lt "$best" ]; then best=$w; fi
  done
  cp "$WORK/stdout" "$WORK/$name.expected"
  PLAIN[$name]=$best
}

ms() { awk -v x="$1" 'BEGIN { printf "%.1f", x / 1e6 }'; }
# row LABEL KIND BASE CMD...: KIND utramp|uftrace; BASE the key of the untraced run.
row() {
  local label=$1 kind=$2 base=$3; shift 3
  local bw=0 bc=0 w c i events=0 lost=0 bytes=0 same=same ev lo by
  for ((i = 0; i < REPEATS; i++)); do
    read -r w c < <(measure "$@")
    if [ "$bw" = 0 ] || [ "$w" -lt "$bw" ]; then bw=$w; fi
    if [ "$bc" = 0 ] || [ "$c" -lt "$bc" ]; then bc=$c; fi
    # The traced program's output: jq's, which record passes through (uftrace's own
    # lines go to stderr).
    cmp -s "$WORK/stdout" "$WORK/$base.expected" || same=DIFFERS
    if [ "$kind" = utramp ]; then
      ev=$(grep -Eo '[0-9]+ events recorded' "$WORK/stderr" | head -1 | grep -Eo '^[0-9]+' || echo 0)
      lo=$(grep -Eo '[0-9]+ events lost' "$WORK/stderr" | head -1 | grep -Eo '^[0-9]+' || echo 0)
    else
      ev=$(($(cat "$WORK"/out/uftrace.data/*.dat 2>/dev/null | wc -c) / 16))
      lo=-
    fi
    by=$(du -sb "$WORK/out" | cut -f1)
    events=$ev bytes=$by
    if [ "$lo" = - ]; then lost=-; else lost=$((lost > lo ? lost : lo)); fi
  done
  LAST_W=$bw LAST_C=$bc
  printf "%-34s %9s %9s %8s %10s %8s %8s %7s\n" "$label" "$(ms "$bw")" "$(ms "$bc")" \
    "$(awk -v a="$bw" -v b="${PLAIN[$base]}" 'BEGIN { printf "%.2f", a / b }')" "$events" "$lost" \
    "$(awk -v b="$bytes" -v e="$events" 'BEGIN { printf "%.1f", e ? b / e : 0 }')" "$same"
}

for t in "${TEST_FILES[@]}"; do
  [ -e "$SRC/tests/$t.test" ] || { echo "no tests/$t.test in jq's source" >&2; exit 1; }
  plain "${t}_pg" "$WORK/jq_pg" -L tests/modules --run-tests "tests/$t.test"
  plain "${t}_pfe" "$WORK/jq_pfe" -L tests/modules --run-tests "tests/$t.test"
  plain "$t" "$WORK/jq_plain" -L tests/modules --run-tests "tests/$t.test"
done
plain none_pg "$WORK/jq_pg" -n 1
plain none_pfe "$WORK/jq_pfe" -n 1
plain none "$WORK/jq_plain" -n 1

nfuncs=$(nm --defined-only "$WORK/jq_pfe" | grep -c ' [tT] ' || true)
echo "# jq $VERSION from Debian's source package ($nfuncs functions), built with dpkg-buildflags"
echo "# $UT; $(uftrace --version 2>/dev/null | head -1)"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for t in "${TEST_FILES[@]}"; do
  echo "# untraced tests/$t.test: $(ms "${PLAIN[$t]}") ms (baseline), $(ms "${PLAIN[${t}_pfe]}") (pfe build), $(ms "${PLAIN[${t}_pg]}") (-pg build), least of $REPEATS"
done
echo "# untraced jq -n 1: $(ms "${PLAIN[none]}") ms (baseline), $(ms "${PLAIN[none_pfe]}") (pfe build), $(ms "${PLAIN[none_pg]}") (-pg build)"
printf "%-34s %9s %9s %8s %10s %8s %8s %7s\n" "row" "wall ms" "cpu ms" "slowdown" "events" "lost" "B/event" "output"
# pair NAME BASE ARGS...: utramp's row and uftrace's for jq ARGS, and their ratio.
RATIOS=()
pair() {
  local name=$1 base=$2; shift 2
  local uw uc
  row "$name: utramp record" utramp "$base" "$UT" record -o "$WORK/out/u" -- "$WORK/jq_pfe" "$@"
  uw=$LAST_W uc=$LAST_C
  row "$name: uftrace record" uftrace "$base" uftrace record -d "$WORK/out/uftrace.data" "$WORK/jq_pg" "$@"
  RATIOS+=("$(printf "%-34s wall %s, cpu %s" "$name" \
    "$(awk -v a="$uw" -v b="$LAST_W" 'BEGIN { printf "%.2f", a / b }')" \
    "$(awk -v a="$uc" -v b="$LAST_C" 'BEGIN { printf "%.2f", a / b }')")")
}
for t in "${TEST_FILES[@]}"; do
  pair "$t.test" "$t" -L tests/modules --run-tests "tests/$t.test"
done
pair "jq -n 1" none -n 1
echo "utramp's slowdown against uftrace's (one baseline for both, so the ratio of their times):"
for r in "${RATIOS[@]}"; do echo "  $r"; done
echo "goals (issue 17): 0 lost at default settings; utramp's slowdown <= 1/3 of uftrace's; a short run's cost <= uftrace's"
