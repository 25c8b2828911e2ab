#!/bin/bash
# The cost of bpf_get_stackid on a 10-frame user stack, per call: a uprobe program that
# takes the stack against an empty uprobe program on the same function, in the same run.
#
#   scripts/bench-ustack.sh [BUILD_DIR] [ROUNDS]
#
# The target is bench/ustack_target.c (N calls of a leaf 10 frames deep), built by gcc
# -O2 with -fomit-frame-pointer (the stack is unwound by the CFI) and with frame
# pointers. Each configuration is timed at two N (CPU time of everything it starts, from
# getrusage of the children) and the cost per call is the slope between them, so the
# start-up cancels out; medians of ROUNDS interleaved rounds (default 3). The programs:
# bench/ustack.bpf.c, as a uprobe and (-DFENTRY) as an fentry program, whose stack
# starts from the entry frame its trampoline publishes.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
cli=$build/tools/utramp/utramp
[ -x "$cli" ] || { echo "build first: $cli is needed" >&2; exit 2; }
tmp=$(mktemp -d /tmp/utramp-bench-ustack-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
arch_inc=/usr/include/$(gcc -print-multiarch)
clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I"$arch_inc" -Iexamples/bpf -DEMPTY -c bench/ustack.bpf.c -o "$tmp/empty.bpf.o"
clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I"$arch_inc" -Iexamples/bpf -c bench/ustack.bpf.c -o "$tmp/stackid.bpf.o"
clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I"$arch_inc" -Iexamples/bpf -DFENTRY -DEMPTY -c bench/ustack.bpf.c -o "$tmp/fentry_empty.bpf.o"
clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I"$arch_inc" -Iexamples/bpf -DFENTRY -c bench/ustack.bpf.c -o "$tmp/fentry_stackid.bpf.o"
gcc -O2 -g -fomit-frame-pointer -o "$tmp/target_nofp" bench/ustack_target.c
gcc -O2 -g -fno-omit-frame-pointer -o "$tmp/target_fp" bench/ustack_target.c
python3 - "$cli" "$tmp" "$rounds" <<'PY'
import resource, statistics, subprocess, sys
cli, tmp, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
lo, hi = 100_000, 500_000
def cpu(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
configs = {}
for t in ("nofp", "fp"):
    target = f"{tmp}/target_{t}"
    configs[f"{t}: plain"] = (lambda target: lambda n: [target, str(n)])(target)
    for prog in ("empty", "stackid"):
        configs[f"{t}: uprobe, {prog}"] = (lambda target, prog: lambda n: [cli, "run", f"{tmp}/{prog}.bpf.o", "--", target, str(n)])(target, prog)
        configs[f"{t}: fentry, {prog}"] = (lambda target, prog: lambda n: [cli, "run", f"{tmp}/fentry_{prog}.bpf.o", "--", target, str(n)])(target, prog)
slopes = {k: [] for k in configs}
for r in range(rounds):
    for k, make in configs.items():
        a = cpu(make(lo))
        b = cpu(make(hi))
        slopes[k].append((b - a) / (hi - lo) * 1e9)
med = {k: statistics.median(v) for k, v in slopes.items()}
for k, v in med.items():
    print(f"{k:28s} {v:8.1f} ns/call")
for t in ("nofp", "fp"):
    for kind in ("uprobe", "fentry"):
        e, s = med[f"{t}: {kind}, empty"], med[f"{t}: {kind}, stackid"]
        print(f"{t}: {kind}: bpf_get_stackid of 10 frames: {s - e:.1f} ns/call over the empty program ({s / e:.2f}x its cost)")
PY
