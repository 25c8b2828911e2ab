#!/usr/bin/env bash
# Installs the dependencies, builds, and runs the main job on the bundled example.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$(nproc)"
./build/tools/utramp/utramp list build/examples/example_app 'shop::*'
