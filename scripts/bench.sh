#!/usr/bin/env bash
# Builds, then runs every benchmark binary (build/bench/bench_*) one after another and
# prints their results. Arguments are passed to each binary (Google Benchmark flags, e.g.
# --benchmark_min_time=0.5); UTRAMP_BENCH_ROUNDS sets the interleaved rounds of
# bench_call_cost, bench_tramp_cost, bench_ebpf_cost and bench_int3_entry (default 5). bench_ebpf_cost
# also runs bpftrace against its target when bpftrace is installed and this runs as root. Each binary runs in well under a
# minute. Timings are never checked: a benchmark is not a test. Method and figures:
# docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${UTRAMP_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUTRAMP_BUILD_BENCH=ON
cmake --build "$build" -j "$(nproc)"
for bin in "$build"/bench/bench_*; do
  [ -f "$bin" ] && [ -x "$bin" ] || continue
  extra=()
  case "$(basename "$bin")" in
    bench_call_cost | bench_tramp_cost | bench_ebpf_cost | bench_int3_entry) extra=("--rounds=${UTRAMP_BENCH_ROUNDS:-5}") ;;
  esac
  echo
  echo "################ $(basename "$bin")"
  "$bin" "${extra[@]}" "$@" 2>&1
done
