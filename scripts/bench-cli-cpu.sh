#!/usr/bin/env bash
# The CLI's own CPU time for `utramp record -q -o OUT -- PROG` of a program of COUNT
# functions that does nothing (scripts/bench-startup.sh's), apart from the traced
# program's: a small library preloaded into the CLI (and, through its LD_PRELOAD, into
# the program) writes each process's getrusage(RUSAGE_SELF) when it ends (user + system
# of all its threads, without its children's; minor faults), beside the whole command's (the
# children's getrusage of the python that runs it). Two builds, interleaved run by run:
#
#   UTRAMP_BUILD=build BASE_BUILD=build-main ./scripts/bench-cli-cpu.sh [COUNT] [RUNS]
#
# (defaults 1000 functions, 15 runs of each); medians, with the load. Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-1000}
RUNS=${2:-15}
. scripts/bench-common.sh  # BUILD, UTRAMP (built when missing)
BASE=${BASE_BUILD:?BASE_BUILD: the build to compare with}
[ -x "$BASE/tools/utramp/utramp" ] || { echo "no $BASE/tools/utramp/utramp" >&2; exit 1; }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3) || { echo "needs python3" >&2; exit 1; }

WORK=$(mktemp -d /tmp/utramp-bench-cli.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
many_functions "$COUNT" >"$WORK/many.c"
gcc -O2 -g -fcf-protection=none -fpatchable-function-entry=5 -o "$WORK/many_pfe" "$WORK/many.c"
cat >"$WORK/selfcpu.c" <<'C'
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>
__attribute__((destructor)) static void report(void) {
  const char* out = getenv("SELFCPU_OUT");
  if (!out) return;
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  char line[128];
  int n = snprintf(line, sizeof line, "%d %ld %ld\n", getpid(),
                   (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000000L + r.ru_utime.tv_usec + r.ru_stime.tv_usec,
                   r.ru_minflt);
  int fd = open(out, O_WRONLY | O_APPEND | O_CREAT, 0600);
  if (fd >= 0) { (void)!write(fd, line, n); close(fd); }
}
C
gcc -O2 -shared -fPIC -o "$WORK/libselfcpu.so" "$WORK/selfcpu.c"

echo "# the CLI's own CPU for record -q of $COUNT functions, $RUNS interleaved runs of each build"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" - "$WORK" "$RUNS" "base=$(realpath "$BASE/tools/utramp/utramp")" "this=$(realpath "$UTRAMP")" <<'PY'
import os, resource, statistics, subprocess, sys
work, runs, builds = sys.argv[1], int(sys.argv[2]), [a.split('=', 1) for a in sys.argv[3:]]
res = {name: ([], [], []) for name, _ in builds}
for _ in range(runs):
    for name, cli in builds:
        out = os.path.join(work, 'cpu')
        if os.path.exists(out): os.unlink(out)
        subprocess.run(['rm', '-rf', os.path.join(work, 'trace')], check=True)
        env = dict(os.environ, SELFCPU_OUT=out, LD_PRELOAD=os.path.join(work, 'libselfcpu.so'))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.Popen([cli, 'record', '-q', '-o', os.path.join(work, 'trace'), '--',
                              os.path.join(work, 'many_pfe')], env=env, stdout=subprocess.DEVNULL)
        p.wait()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        own = {int(pid): (int(us), int(flt)) for pid, us, flt in (line.split() for line in open(out))}
        res[name][0].append(own[p.pid][0] / 1e3)
        res[name][2].append(own[p.pid][1])
        res[name][1].append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1e3)
for name, cli in builds:
    c, t, f = res[name]
    print(f"{name:5s} CLI {statistics.median(c):6.2f} ms, {statistics.median(f):5.0f} faults   "
          f"command {statistics.median(t):6.2f} ms   (medians; {cli})")
print("load after:", ' '.join(open('/proc/loadavg').read().split()[:3]))
PY
