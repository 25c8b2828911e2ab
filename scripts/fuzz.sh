#!/usr/bin/env bash
# Builds the loader fuzzer (tests/ebpf/loader_fuzz.cpp) with clang, libFuzzer and
# AddressSanitizer in build-fuzz/ (a dozen files: only what the loader needs), and runs
# it for SECONDS (default 60) seeded with the eBPF objects of examples/bpf and
# tests/ebpf/bpf. Fails on a crash, a leak, a timeout (one input over 10 s) or an input
# that takes more than 2 GB; the input that did it is left in build-fuzz/fuzz-artifacts/
# and reproduces with `build-fuzz/tests/ebpf/fuzz_ebpf_loader FILE`.
#
#   scripts/fuzz.sh            # CI: one minute
#   scripts/fuzz.sh 1800       # by hand: half an hour; the corpus it grows stays in
#                              # build-fuzz/fuzz-corpus and seeds the next run
# Extra arguments go to libFuzzer (e.g. -jobs=2 -workers=2).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
build=${UTRAMP_FUZZ_BUILD_DIR:-build-fuzz}
CC=${CC_FUZZ:-clang} CXX=${CXX_FUZZ:-clang++} \
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUTRAMP_FUZZ=ON \
  -DUTRAMP_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target fuzz_ebpf_loader
corpus=$build/fuzz-corpus
artifacts=$build/fuzz-artifacts
mkdir -p "$corpus" "$artifacts"
seeds=$(find "$build/examples/bpf" "$build/tests/ebpf/bpf" -name '*.bpf.o' | sort | paste -sd, -)
echo "fuzzing the eBPF loader for ${seconds}s, seeds: $(echo "$seeds" | tr ',' '\n' | wc -l) objects"
"$build/tests/ebpf/fuzz_ebpf_loader" "$corpus" -seed_inputs="$seeds" -max_total_time="$seconds" \
  -max_len=65536 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$artifacts/" -print_final_stats=1 "$@"
