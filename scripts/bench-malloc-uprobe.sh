#!/bin/bash
# The per-call cost of a uprobe on libc's malloc: under `utramp run` (an empty program,
# and one that updates a hash map), beside the kernel's uprobe through bpftrace (empty,
# and `@[tid] = count()`), in the same run, as a ratio.
#
#   scripts/bench-malloc-uprobe.sh [BUILD_DIR] [ROUNDS] [BASELINE_BUILD_DIR]
#
# With BASELINE_BUILD_DIR (another build of utramp, e.g. of the commit before a change),
# its CLI runs the same programs in the same rounds ("baseline" lines): a change's
# effect measured in one run.
#
# The target is examples/bpf/malloc_target (one thread: N malloc+free pairs). Each
# configuration is timed at two N (CPU time of everything it starts, user + system, from
# getrusage of the children), and the cost per call is the slope between them: the
# start-up (utramp's analysis of libc, bpftrace's compile) cancels out. Medians of
# ROUNDS interleaved rounds (default 3). The programs: bench/malloc_uprobe.bpf.c. bpftrace needs root and a kernel that lets it
# attach uprobes; without either, that line says why and only utramp's are shown.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
baseline=${3:-}
target=$build/examples/bpf/malloc_target
cli=$build/tools/utramp/utramp
[ -x "$target" ] && [ -x "$cli" ] || { echo "build first: $target and $cli are needed" >&2; exit 2; }
base_cli=""
if [ -n "$baseline" ]; then
  base_cli=$baseline/tools/utramp/utramp
  [ -x "$base_cli" ] || { echo "no baseline CLI at $base_cli" >&2; exit 2; }
fi
tmp=$(mktemp -d /tmp/utramp-bench-malloc-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
arch_inc=/usr/include/$(gcc -print-multiarch)
for kind in empty update; do
  def=$([ $kind = empty ] && echo -DEMPTY || true)
  clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I"$arch_inc" -Iexamples/bpf $def \
    -c bench/malloc_uprobe.bpf.c -o "$tmp/$kind.bpf.o"
done
# A kernel uprobe is on a file (its inode), for every process that maps it: the target
# runs with a copy of the C library of its own (LD_LIBRARY_PATH, in every configuration
# alike), so that the other processes on the machine do not take bpftrace's probes.
cp "$(ldd "$target" | awk '/libc.so.6/ {print $3}')" "$tmp/libc.so.6"
libc=$tmp/libc.so.6
export LD_LIBRARY_PATH=$tmp
have_bpftrace=""
if ! command -v bpftrace >/dev/null; then
  why="bpftrace is not installed (Debian: apt-get install bpftrace)"
elif [ "$(id -u)" != 0 ]; then
  why="bpftrace needs root"
elif out=$(bpftrace -e "uprobe:$libc:malloc { }" -c "$target 1 10" 2>&1); then
  have_bpftrace=1
else
  why="bpftrace could not attach: $(echo "$out" | grep -v '^Attaching' | head -3 | tr '\n' ' ')"
fi
python3 - "$target" "$cli" "$tmp" "$libc" "$rounds" "$have_bpftrace" "$base_cli" <<'PY'
import os, resource, statistics, subprocess, sys
target, cli, tmp, libc, rounds, have_bt, base_cli = sys.argv[1:8]
rounds = int(rounds)
lo, hi = 200_000, 1_000_000
def cpu(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
configs = {
    "plain": lambda n: [target, "1", str(n)],
    "utramp uprobe, empty program": lambda n: [cli, "run", f"{tmp}/empty.bpf.o", "--", target, "1", str(n)],
    "utramp uprobe, one map update": lambda n: [cli, "run", f"{tmp}/update.bpf.o", "--", target, "1", str(n)],
}
if base_cli:
    configs["baseline uprobe, empty program"] = lambda n: [base_cli, "run", f"{tmp}/empty.bpf.o", "--", target, "1", str(n)]
    configs["baseline uprobe, one map update"] = lambda n: [base_cli, "run", f"{tmp}/update.bpf.o", "--", target, "1", str(n)]
if have_bt:
    configs["kernel uprobe (bpftrace), empty"] = lambda n: ["bpftrace", "-e", f"uprobe:{libc}:malloc {{ }}", "-c", " ".join([target, "1", str(n)])]
    configs["kernel uprobe (bpftrace), @[tid] = count()"] = lambda n: ["bpftrace", "-e", f"uprobe:{libc}:malloc {{ @[tid] = count(); }}", "-c", " ".join([target, "1", str(n)])]
per = {k: [] for k in configs}
for r in range(rounds):
    for name, cmd in configs.items():
        # each malloc_target iteration is one malloc (and one free, not probed)
        per[name].append((cpu(cmd(hi)) - cpu(cmd(lo))) / (hi - lo) * 1e9)
med = {k: statistics.median(v) for k, v in per.items()}
cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"malloc uprobe cost: {cpu_model}, {os.cpu_count()} CPUs, kernel {os.uname().release}, "
      f"load {os.getloadavg()[0]:.1f}; CPU ns per malloc+free (slope {lo}..{hi}), median of {rounds}")
base = med["plain"]
for name, v in med.items():
    extra = "" if name == "plain" else f"  +{v - base:8.1f} over plain"
    print(f"  {name:45s} {v:9.1f}{extra}")
def ratio(k, u):
    if k in med and u in med and med[u] - base > 0:
        print(f"  kernel/utramp per call ({k.split(', ')[1]}): {(med[k] - base) / (med[u] - base):.1f}x")
ratio("kernel uprobe (bpftrace), empty", "utramp uprobe, empty program")
ratio("kernel uprobe (bpftrace), @[tid] = count()", "utramp uprobe, one map update")
def change(b, u):
    if b in med and u in med and med[u] - base > 0:
        print(f"  baseline/this build per call ({u.split(', ')[1]}): {(med[b] - base) / (med[u] - base):.2f}x")
change("baseline uprobe, empty program", "utramp uprobe, empty program")
change("baseline uprobe, one map update", "utramp uprobe, one map update")
PY
if [ -z "$have_bpftrace" ]; then
  echo "  kernel uprobe (bpftrace): not measured: $why"
fi
