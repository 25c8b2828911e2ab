# Sourced by the scripts/bench-*.sh scripts, from the repository's root: the utramp CLI
# and agent they measure. Sets BUILD (UTRAMP_BUILD, default build) and UTRAMP (the CLI,
# relative to the root); configures and builds both when either is missing. Defines
# many_functions, the start-up benchmarks' program.
BUILD=${UTRAMP_BUILD:-build}
UTRAMP=$BUILD/tools/utramp/utramp
if [ ! -x "$UTRAMP" ] || [ ! -e "$BUILD/src/libutramp-agent.so" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$BUILD" --target utramp_cli utramp_agent
fi

# many_functions COUNT: the C program of COUNT distinct tiny functions, all reachable
# through a table so that none is dropped, whose main calls three (bench-startup.sh,
# bench-cli-cpu.sh).
many_functions() {
  local i
  for ((i = 0; i < $1; i++)); do
    echo "__attribute__((noinline)) int fn_$i(int x) { return x ^ $((i + 1)); }"
  done
  echo "int (*const tab[])(int) = {"
  for ((i = 0; i < $1; i++)); do echo "  fn_$i,"; done
  echo "};"
  echo "int main(void) { int x = 0; for (int i = 0; i < 3; ++i) x = tab[i](x); return x == -1; }"
}
