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
# Extra arguments go to libFuzzer (e.g. -jobs=2 -workers=2).
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
  cmake --build "$build" -j "$(nproc)" --target "fuzz_ebpf_$t"
  case $t in
    loader)
      corpus=$build/fuzz-corpus
      mkdir -p "$corpus"
      seeds=$(find "$build/examples/bpf" "$build/tests/ebpf/bpf" -name '*.bpf.o' | sort | paste -sd, -)
      echo "fuzzing the eBPF loader for ${seconds}s, seeds: $(echo "$seeds" | tr ',' '\n' | wc -l) objects"
      "$build/tests/ebpf/fuzz_ebpf_loader" "$corpus" -seed_inputs="$seeds" -max_total_time="$seconds" \
        -max_len=65536 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$artifacts/" -print_final_stats=1 "$@"
      ;;
    verifier)
      corpus=$build/fuzz-corpus-verifier
      mkdir -p "$corpus"
      echo "fuzzing the eBPF verifier (differential, interpreter) for ${seconds}s"
      "$build/tests/ebpf/fuzz_ebpf_verifier" "$corpus" -max_total_time="$seconds" -max_len=512 -timeout=10 \
        -rss_limit_mb=2048 -artifact_prefix="$artifacts/" -print_final_stats=1 "$@"
      ;;
    *) echo "unknown fuzz target $t (loader, verifier)" >&2; exit 2 ;;
  esac
done
