# Sourced by the scripts/bench-*.sh scripts, from the repository's root: the utramp CLI
# and agent they measure. Sets BUILD (UTRAMP_BUILD, default build) and UTRAMP (the CLI,
# relative to the root); configures and builds both when either is missing.
BUILD=${UTRAMP_BUILD:-build}
UTRAMP=$BUILD/tools/utramp/utramp
if [ ! -x "$UTRAMP" ] || [ ! -e "$BUILD/src/libutramp-agent.so" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$BUILD" --target utramp_cli utramp_agent
fi
