#!/usr/bin/env bash
set -euo pipefail
build=$1
src=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
pc=$(dirname "$(find "$prefix" -name utramp.pc | head -1)")
test -n "$pc" || { echo "utramp.pc was not installed"; exit 1; }
test -x "$prefix/bin/utramp" || { echo "the utramp binary was not installed"; exit 1; }
export PKG_CONFIG_PATH="$pc"
# -fpatchable-function-entry: the consumer's functions get compiler sites (C11, and
# warnings as errors: the header must stay clean C).
cc -std=c11 -Wall -Wextra -Werror -O2 -fpatchable-function-entry=5 -o "$prefix/consumer" "$src" \
  $(pkg-config --cflags --libs utramp)
"$prefix/consumer"
"$prefix/bin/utramp" --version
