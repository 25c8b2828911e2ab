#!/usr/bin/env bash
# Installs the dependencies, builds, and runs the whole test suite through ctest: the
# regular build, then the unit and stress tests again under AddressSanitizer, then the
# eBPF loader and verifier fuzzers for a minute each (scripts/fuzz.sh; UTRAMP_FUZZ_SECONDS changes it,
# UTRAMP_SKIP_FUZZ=1 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 600
if [ "${UTRAMP_SKIP_ASAN:-0}" != 1 ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUTRAMP_SANITIZE=address \
    -DUTRAMP_BUILD_BENCH=OFF
  cmake --build build-asan -j "$jobs"
  ASAN_OPTIONS=detect_leaks=0 ctest --test-dir build-asan --output-on-failure -j "$jobs" \
    --timeout 600 -L 'unit|stress'
fi
if [ "${UTRAMP_SKIP_FUZZ:-0}" != 1 ]; then
  ./scripts/fuzz.sh "${UTRAMP_FUZZ_SECONDS:-60}"
fi
