#!/usr/bin/env bash
# Time from `utramp record -p PID` to the first recorded event (issue 16's benchmark),
# for a running process of 1 and of 64 threads that call traced functions in a loop
# (tests/attach/attach_counter.c built by clang with -fpatchable-function-entry=5, as
# the record -p tests build it: its entries become jumps while the threads run). Beside it,
# the target's pause (the injector's own measure, printed by the CLI at the first
# attach, when the agent is loaded) and the command's whole time.
#
#   ./scripts/bench-attach-first-event.sh [REPEATS]     (default 5)
#
# What is timed: from just before the command is started to the moment the first events
# file of the recording holds more than its 32-byte header (docs/trace-format.md), polled
# every 0.2 ms; so it includes the CLI's own start-up, the injection (first attach only;
# the later ones find the agent loaded), the configuration, the live patching, the first
# call and the recorder's first drain. The first attach is reported apart from the
# later ones (median and range). Not a test: never run by ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS=${1:-5}
BUILD=${UTRAMP_BUILD:-build}
UTRAMP=$BUILD/tools/utramp/utramp
TARGET=$BUILD/tests/attach/counter_targets/attach_counter_clang_pfe
if [ ! -x "$UTRAMP" ] || [ ! -x "$TARGET" ] || [ ! -e "$BUILD/src/libutramp-agent.so" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$BUILD" --target utramp_cli utramp_agent counter_targets
fi
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3) || { echo "needs python3" >&2; exit 1; }
WORK=$(mktemp -d /tmp/utramp-bench-first-event.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

echo "# time from utramp record -p to the first recorded event; $REPEATS attaches per target"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" - "$(realpath "$UTRAMP")" "$(realpath "$TARGET")" "$WORK" "$REPEATS" <<'PY'
import os, re, statistics, subprocess, sys, time

utramp, target, work, repeats = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
HEADER = 32  # an events file's header (docs/trace-format.md)

def first_event(out):
    """Seconds until an events file under OUT holds a record, or None."""
    for name in os.listdir(out) if os.path.isdir(out) else []:
        if name.startswith("events-"):
            try:
                if os.path.getsize(os.path.join(out, name)) > HEADER:
                    return True
            except OSError:
                pass
    return False

print(f"{'threads':>8} {'attach':>8} {'first event ms':>15} {'command ms':>11} {'pause ms':>9}")
for threads in (1, 64):
    p = subprocess.Popen([target, str(threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    line = p.stdout.readline()
    if not line.startswith("ready"):
        sys.exit(f"the target did not start: {line!r}")
    later = []
    try:
        for k in range(repeats):
            out = os.path.join(work, f"t{threads}-{k}")
            t0 = time.monotonic()
            cli = subprocess.Popen([utramp, "record", "-p", str(p.pid), "--duration", "300ms", "-o", out],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            seen = None
            while seen is None and cli.poll() is None:
                if first_event(out):
                    seen = time.monotonic() - t0
                else:
                    time.sleep(0.0002)
            err = cli.communicate()[1]
            total = time.monotonic() - t0
            if cli.returncode != 0 or seen is None:
                sys.exit(f"record -p failed (exit {cli.returncode}, first event {'seen' if seen else 'not seen'}):\n{err}")
            m = re.search(r"paused ([0-9.]+) ms", err)
            pause = m.group(1) if m else "-"
            if k == 0:
                print(f"{threads:>8} {'first':>8} {seen * 1e3:>15.1f} {total * 1e3:>11.1f} {pause:>9}")
            else:
                later.append(seen * 1e3)
        if later:
            print(f"{threads:>8} {'later':>8} {statistics.median(later):>15.1f}   "
                  f"(range {min(later):.1f}-{max(later):.1f} over {len(later)})")
    finally:
        p.stdin.write("q")
        p.stdin.close()
        p.wait()
print("first: the agent is injected (its pause is the target's); later: the agent is there already")
PY
