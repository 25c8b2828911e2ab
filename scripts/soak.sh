#!/usr/bin/env bash
# Soak test (not in CI): records a multi-threaded program that forks, execs, throws,
# longjmps and takes signals (scripts/soak_target.cpp), again and again for MINUTES
# (default 10), while a second process ends recordings at random: SIGINT to the CLI
# alone (it must ignore it), SIGINT to the whole process group (Ctrl-C: the target dies
# of it, the CLI saves), SIGKILL of the CLI (the target runs on and must still finish
# right), SIGKILL of the target; or lets them finish. Ring sizes vary, so that some
# recordings lose events. At the end it checks:
#   - zero crashes of the target: every target ended as its run says it must (its exit
#     status, its "soak ok", and the report each of its processes wrote: its own checks
#     of results, exceptions caught, longjmps landed, children's statuses);
#   - zero corrupt trace directories: `utramp replay` and `utramp report` read every one
#     without error, and those whose recording was cut (CLI killed) say so;
#   - every loss counted: for each thread of a recording that ran to its end, the events
#     in its file + the losses marked there = 2 x the traced calls the thread says it
#     made + its forks (each call is an entry and an exit; a leaf record counts two);
#     and wherever info.json was finished, its per-thread counts are those of the files.
# Prints a summary; exits 1 on any violation (the directories at fault are kept, and
# named), 0 otherwise. Needs a build (BUILD, default build/) and python3.
#
#   scripts/soak.sh [MINUTES]          BUILD=build-asan scripts/soak.sh 30
set -euo pipefail

MINUTES="${1:-10}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
UTRAMP="$BUILD/tools/utramp/utramp"
[ -x "$UTRAMP" ] || { echo "soak: no $UTRAMP (build first: cmake --build build)" >&2; exit 2; }
command -v python3 > /dev/null || { echo "soak: python3 is needed (scripts/install-deps.sh)" >&2; exit 2; }
case "$MINUTES" in '' | *[!0-9]*) echo "soak: MINUTES must be a whole number" >&2; exit 2 ;; esac

WORK="$(mktemp -d "${TMPDIR:-/tmp}/utramp-soak-XXXXXX")"
KEEP="$WORK/kept"  # directories at fault
mkdir -p "$KEEP"
# -fno-optimize-sibling-calls: gcc -O2 turns k_rec's self-recursion into a loop and its
# tail call of k_leaf into a jump, calls the target counts but that never happen.
g++ -O2 -g -fno-optimize-sibling-calls -fpatchable-function-entry=5 -fcf-protection=none -pthread \
  -o "$WORK/soak_target" "$ROOT/scripts/soak_target.cpp" -lrt

# Everything this script started, so that an interrupted soak leaves nothing running:
# the CLI leads its own process group (setsid), which the target is in, so the group
# goes; the killer subshell alone. KEEP_WORK=1 (set on a violation) keeps $WORK.
PIDS=()
KEEP_WORK=0
cleanup() {
  for p in "${PIDS[@]}"; do
    kill -KILL -- "-$p" 2> /dev/null || kill -KILL "$p" 2> /dev/null || true
  done
  [ "$KEEP_WORK" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT

# ---- the checker of one trace directory ---------------------------------------------
# python3 CHECK DIR REPORT_DIR COMPLETE: prints one line per violation (none: ok).
# COMPLETE=1: the recording ran to its end and the target's reports are there.
cat > "$WORK/check.py" << 'EOF'
import json, os, re, struct, subprocess, sys

trace, reports, complete = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
LEAF, LOST, FORK = 10, 7, 8
files = {}  # (pid, tid) -> [events, forks, lost]
for name in os.listdir(trace):
    m = re.fullmatch(r"events-(\d+)-(\d+)\.bin", name)
    if not m:
        continue
    with open(os.path.join(trace, name), "rb") as f:
        data = f.read()
    if len(data) < 32 or data[:8] != b"UTRTHR01":
        print(f"{name}: no events file header")
        continue
    if struct.unpack_from("<I", data, 24)[0] & 1:  # zstd frames (record --compress zstd)
        data = data[:32] + subprocess.run(["zstd", "-dcq"], input=data[32:], stdout=subprocess.PIPE,
                                          check=True).stdout
    ev = forks = lost = 0
    for off in range(32, len(data) - len(data[32:]) % 32, 32):
        typ = data[off + 26]
        if typ == LOST:
            lost += struct.unpack_from("<Q", data, off + 16)[0]
        elif typ == FORK:
            forks += 1
        else:
            ev += 2 if typ == LEAF else 1
    files[(int(m[1]), int(m[2]))] = [ev, forks, lost]

info = None
try:
    with open(os.path.join(trace, "info.json")) as f:
        info = json.load(f)
except (OSError, ValueError):
    pass
if info is not None and info.get("exit"):
    for t in info.get("threads", []):
        got = files.get((t["pid"], t["tid"]), [0, 0, 0])
        if t["events"] != got[0] + got[1] or t["lost"] != got[2]:
            print(f"thread {t['pid']}/{t['tid']}: info.json says {t['events']} events, {t['lost']} lost; "
                  f"the file holds {got[0] + got[1]} events, {got[2]} lost")

if complete:
    seen = 0
    for name in os.listdir(reports):
        if not re.fullmatch(r"report-\d+\.txt", name):
            continue
        for line in open(os.path.join(reports, name)):
            w = line.split()
            if w[0] == "bad":
                print(f"{name}: the target's own check failed: {line.strip()}")
            if w[0] != "call":
                continue
            pid, tid, calls, forks = map(int, w[1:5])
            seen += 1
            got = files.get((pid, tid))
            want = 2 * calls + forks
            if got is None:
                if want:
                    print(f"thread {pid}/{tid}: {calls} calls, {forks} forks, and no events file")
                continue
            if got[0] + got[1] + got[2] != want:
                print(f"thread {pid}/{tid}: {calls} calls and {forks} forks are {want} events; "
                      f"{got[0] + got[1]} delivered + {got[2]} lost = {sum(got)}")
    if seen == 0:
        print("no report of the target's threads")
EOF

# ---- one recording --------------------------------------------------------------------
declare -A COUNT=()
VIOLATIONS=0
RUNS=0
LEAKED_SHM=0
violation() {  # RUN WHAT
  echo "soak: run $1: $2" >&2
  VIOLATIONS=$((VIOLATIONS + 1))
}

wait_gone() {  # PID SECONDS: whether PID ended within SECONDS
  local i
  for ((i = 0; i < $2 * 20; i++)); do
    kill -0 "$1" 2> /dev/null || return 0
    sleep 0.05
  done
  return 1
}

run_once() {
  local n=$1 action=$2
  local dir="$WORK/run-$n" rep="$WORK/rep-$n" out="$WORK/out-$n" err="$WORK/err-$n"
  mkdir -p "$rep"
  local threads=$((2 + RANDOM % 4)) iters=$((500 + RANDOM % 3000))
  local bufsize=$((1 << (10 + RANDOM % 8)))  # 1 Ki .. 128 Ki events a ring
  # Its own process group (Ctrl-C reaches a group), stdin from nowhere.
  setsid "$UTRAMP" record --follow-exec -F 'k_*' --buffer-size "$bufsize" -o "$dir" \
    -- "$WORK/soak_target" "$rep" "$threads" "$iters" < /dev/null > "$out" 2> "$err" &
  local cli=$!
  PIDS+=("$cli")
  # The second process: once the target runs, ends the recording its own way after a
  # while (before the target runs, SIGINT would end the CLI as Ctrl-C ends any program).
  local delay="0.$((RANDOM % 10))$((RANDOM % 10))"
  (
    target=""
    for ((i = 0; i < 400; i++)); do
      [ -z "$target" ] || break
      target=$(cat "/proc/$cli/task/$cli/children" 2> /dev/null | awk '{print $1}')
      [ -n "$target" ] || sleep 0.01
    done
    sleep "$delay"
    case $action in
      cli_int) kill -INT "$cli" 2> /dev/null ;;
      group_int) kill -INT -- "-$cli" 2> /dev/null ;;
      cli_kill) [ -n "$target" ] && echo "$target" > "$WORK/orphan-$n"; kill -KILL "$cli" 2> /dev/null ;;
      target_kill) [ -n "$target" ] && kill -KILL "$target" 2> /dev/null ;;
    esac
  ) &
  local killer=$!
  PIDS+=("$killer")
  local code=0
  if ! wait_gone "$cli" 120; then
    violation "$n" "the CLI did not end within 120 s ($action)"
    kill -KILL "$cli" 2> /dev/null || true
  fi
  wait "$cli" 2> /dev/null || code=$?
  wait "$killer" 2> /dev/null || true
  RUNS=$((RUNS + 1))

  # What the target must have done.
  local complete=0
  case $action in
    finish | cli_int)
      if [ "$code" -ne 0 ] || ! grep -qx "soak ok" "$out"; then
        violation "$n" "target failed ($action): exit $code; $(tail -c 300 "$err" | tr '\n' ' ')"
      else
        complete=1
      fi
      ;;
    group_int)  # Ctrl-C: killed by SIGINT, or done before it came
      if [ "$code" -eq 0 ] && grep -qx "soak ok" "$out"; then complete=1
      elif [ "$code" -ne 130 ]; then violation "$n" "target neither finished nor died of SIGINT: exit $code"
      fi
      ;;
    target_kill)
      if [ "$code" -eq 0 ] && grep -qx "soak ok" "$out"; then complete=1
      elif [ "$code" -ne 137 ]; then violation "$n" "target neither finished nor died of SIGKILL: exit $code"
      fi
      ;;
    cli_kill)
      if [ "$code" -eq 0 ] && grep -qx "soak ok" "$out"; then
        complete=1  # done before the kill
      else
        # The target runs on without its recorder: it must still end right.
        local orphan
        orphan=$(cat "$WORK/orphan-$n" 2> /dev/null || true)
        if [ -n "$orphan" ] && ! wait_gone "$orphan" 120; then
          violation "$n" "the target ($orphan) did not end within 120 s after its recorder was killed"
        fi
        if ! grep -qx ok "$rep/report-$orphan.txt" 2> /dev/null || grep -q '^bad' "$rep"/report-*.txt 2> /dev/null; then
          violation "$n" "the target went wrong after its recorder was killed: $(cat "$rep"/report-*.txt 2> /dev/null | grep -v '^call' | tr '\n' ' ')"
        fi
      fi
      # Its ring buffer file, which no one removes after a SIGKILL of the CLI.
      for f in /dev/shm/utramp-"$cli"-*.buffers; do
        [ -e "$f" ] && { rm -f "$f"; LEAKED_SHM=$((LEAKED_SHM + 1)); }
      done
      ;;
  esac
  COUNT["$action"]=$((${COUNT["$action"]:-0} + 1))

  # The trace directory: readable, says when it was cut, counts add up.
  local bad=0
  if [ -d "$dir" ]; then
    local r
    for cmd in replay report; do
      if ! "$UTRAMP" "$cmd" "$dir" > "$WORK/$cmd-$n.out" 2> "$WORK/$cmd-$n.err"; then
        violation "$n" "utramp $cmd failed ($action): $(head -c 300 "$WORK/$cmd-$n.err")"
        bad=1
      fi
    done
    if [ "$action" = cli_kill ] && [ "$complete" -eq 0 ] &&
      ! grep -qiE 'cut|did not finish|not finished|killed|truncated' "$WORK/replay-$n.err"; then
      violation "$n" "the recording was cut (CLI killed) and replay does not say so"
      bad=1
    fi
    r=$(python3 "$WORK/check.py" "$dir" "$rep" "$complete")
    if [ -n "$r" ]; then
      violation "$n" "counts ($action, --buffer-size $bufsize): $(echo "$r" | head -5 | tr '\n' ';')"
      bad=1
    fi
  elif [ "$complete" -eq 1 ]; then
    violation "$n" "no trace directory"
  fi
  if [ "$bad" -eq 1 ]; then
    mv "$dir" "$KEEP/run-$n" 2> /dev/null || true
    cp "$err" "$KEEP/run-$n.stderr" 2> /dev/null || true
    cp -r "$rep" "$KEEP/run-$n.reports" 2> /dev/null || true
  fi
  rm -rf "$dir" "$rep" "$out" "$err" "$WORK"/replay-"$n".* "$WORK"/report-"$n".* "$WORK/orphan-$n"
  PIDS=()
}

ACTIONS=(finish finish cli_int group_int cli_kill target_kill)
END=$((SECONDS + MINUTES * 60))
n=0
while [ "$SECONDS" -lt "$END" ]; do
  n=$((n + 1))
  run_once "$n" "${ACTIONS[$((RANDOM % ${#ACTIONS[@]}))]}"
done

echo "soak: $RUNS recordings in $MINUTES min:" \
  "$(for a in "${ACTIONS[@]}"; do echo "$a"; done | sort -u | while read -r a; do printf '%s %s, ' "$a" "${COUNT[$a]:-0}"; done)"
echo "soak: ring buffer files left by killed recorders (removed): $LEAKED_SHM"
if [ "$VIOLATIONS" -ne 0 ]; then
  echo "soak: $VIOLATIONS violation(s); the directories at fault are in $KEEP" >&2
  trap - EXIT
  KEEP_WORK=1
  cleanup
  exit 1
fi
echo "soak: no violation"
rm -rf "$WORK"
