#!/usr/bin/env bash
# Builds the eBPF fuzzers with clang, libFuzzer and AddressSanitizer in build-fuzz/
# (only the files each needs) and runs each for SECONDS (default 60):
#   - the loader (tests/ebpf/loader_fuzz.cpp), seeded with the eBPF objects of
#     examples/bpf and tests/ebpf/bpf;
#   - the verifier (tests/ebpf/verifier_fuzz.cpp): generated programs, the accepted ones
#     run on the interpreter with every run-time check on, none of which may trip.
# Fails on a crash, a leak, a timeout (one input over 10 s), an input that takes more
# than 2 GB, or an accepted program that trips a check; the input that did it is left
# in build-fuzz/fuzz-artifacts/ and reproduces with `build-fuzz/tests/ebpf/fuzz_ebpf_NAME FILE`.
#
#   scripts/fuzz.sh            # CI: one minute each
#   scripts/fuzz.sh 1800       # by hand: half an hour each; the corpora they grow stay in
#                              # build-fuzz/fuzz-corpus[-verifier] and seed the next run
#   UTRAMP_FUZZ_TARGETS=verifier scripts/fuzz.sh 600    # one of them
# Extra arguments go to libFuzzer (e.g. -jobs=2 -workers=2). The targets run at the same
# time, one process each.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=${UTRAMP_FUZZ_TARGETS:-loader verifier}
build=${UTRAMP_FUZZ_BUILD_DIR:-build-fuzz}
CC=${CC_FUZZ:-clang} CXX=${CXX_FUZZ:-clang++} \
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUTRAMP_FUZZ=ON \
  -DUTRAMP_BUILD_BENCH=OFF >/dev/null
artifacts=$build/fuzz-artifacts
mkdir -p "$artifacts"
for t in $targets; do
  case $t in
    loader | verifier) ;;
    *) echo "unknown fuzz target $t (loader, verifier)" >&2; exit 2 ;;
  esac
done
# Build every target first, then run them side by side (one core each: CI has two), each
# writing its own log, printed when all have ended.
# shellcheck disable=SC2086
cmake --build "$build" -j "$(nproc)" --target $(printf 'fuzz_ebpf_%s ' $targets)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
pids=()
for t in $targets; do
  case $t in
    loader)
      corpus=$build/fuzz-corpus
      mkdir -p "$corpus"
      seeds=$(find "$build/examples/bpf" "$build/tests/ebpf/bpf" -name '*.bpf.o' | sort | paste -sd, -)
      echo "fuzzing the eBPF loader for ${seconds}s, seeds: $(echo "$seeds" | tr ',' '\n' | wc -l) objects"
      "$build/tests/ebpf/fuzz_ebpf_loader" "$corpus" -seed_inputs="$seeds" -max_total_time="$seconds" \
        -max_len=65536 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$artifacts/" -print_final_stats=1 "$@" \
        >"$logs/$t" 2>&1 &
      ;;
    verifier)
      corpus=$build/fuzz-corpus-verifier
      mkdir -p "$corpus"
      echo "fuzzing the eBPF verifier (differential, interpreter) for ${seconds}s"
      "$build/tests/ebpf/fuzz_ebpf_verifier" "$corpus" -max_total_time="$seconds" -max_len=512 -timeout=10 \
        -rss_limit_mb=2048 -artifact_prefix="$artifacts/" -print_final_stats=1 "$@" >"$logs/$t" 2>&1 &
      ;;
  esac
  pids+=("$!")
done
failed=0
i=0
for t in $targets; do
  status=0
  wait "${pids[$i]}" || status=$?
  i=$((i + 1))
  echo "---- fuzz_ebpf_$t (exit $status) ----"
  # The whole log of a failure; of a pass, its last lines (the final stats).
  if [ "$status" != 0 ]; then cat "$logs/$t"; failed=1; else tail -n 15 "$logs/$t"; fi
done
exit "$failed"
