#!/usr/bin/env bash
# Installs the dependencies, builds, and runs the main job on the bundled example:
# record its function calls, then show the call graph and the per-function report, and
# write the HTML report (flame graph, timelines, sortable table) of the recording.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$(nproc)"
out=build/example.data
./build/tools/utramp/utramp record -o "$out" -- ./build/examples/example_app 2 3
./build/tools/utramp/utramp replay "$out" | head -60  # replay ends quietly when head has enough
./build/tools/utramp/utramp report "$out"
report="$PWD/build/example-report.html"
./build/tools/utramp/utramp report --html "$out" > "$report"
echo "HTML report of the example (self-contained, open it in a browser): $report"
