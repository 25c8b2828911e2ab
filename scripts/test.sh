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
  # -O1 -g1, as AddressSanitizer's documentation advises: about half the compile time of
  # -O2 -g, with line tables for its reports. Fixtures set their own -O and -g.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUTRAMP_SANITIZE=address \
    -DUTRAMP_BUILD_BENCH=OFF -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG"
  # Only what the unit and stress tests run (their executables, and what those depend
  # on): the e2e tests, their fixtures and the examples run in the build above alone.
  targets=$(ninja -C build-asan -t targets all |
    sed -nE 's#^tests/[^:]*/((unit|stress)_[A-Za-z0-9_]+): CXX_EXECUTABLE_LINKER.*#\1#p' | sort -u)
  [ -n "$targets" ] || { echo "test.sh: no unit or stress test targets in build-asan" >&2; exit 1; }
  # shellcheck disable=SC2086
  cmake --build build-asan -j "$jobs" --target $targets
  ASAN_OPTIONS=detect_leaks=0 ctest --test-dir build-asan --output-on-failure -j "$jobs" \
    --timeout 600 -L 'unit|stress'
fi
if [ "${UTRAMP_SKIP_FUZZ:-0}" != 1 ]; then
  ./scripts/fuzz.sh "${UTRAMP_FUZZ_SECONDS:-60}"
fi
