#!/usr/bin/env bash
# See gpr_only.cmake. The code of the general-purpose-only sources (src/CMakeLists.txt,
# UTRAMP_GPR_ONLY) uses no x87, MMX, SSE, AVX or AVX-512 instruction or register; the
# extended-state saves the probe hit path makes on purpose (xsave*, xrstor*, fxsave*,
# fxrstor*) and the functions written in assembly to save the vector registers
# (EXCEPT, a regular expression of their names) are the exception.
#
#   gpr_only_test.sh objects EXCEPT SRC_LIST OBJECT...        the build's own objects
#   gpr_only_test.sh clang EXCEPT CLANGXX SRC_DIR SRC_LIST FLAG...   each source built by clang
#
# SRC_LIST is the sources' paths relative to src/, separated by ','.
set -euo pipefail

# Prints the offending instructions of an object, by function; fails if there is one.
check() {
  local obj=$1 name=$2 bad
  bad=$(objdump -d --no-show-raw-insn "$obj" | awk -v name="$name" -v except="$except" '
    /^[0-9a-f]+ <.*>:$/ { fn = substr($2, 2, length($2) - 3) }
    /^ *[0-9a-f]+:\t/ {
      if (fn ~ except) next
      split($0, f, "\t"); insn = f[2]; split(insn, w, " "); m = w[1]
      if (m ~ /^(xsave|xrstor|fxsave|fxrstor)/) next
      if (m ~ /^f/ || m == "emms" || m ~ /mxcsr$/ || insn ~ /%([xyz]mm|st|mm[0-7]|k[0-7]|tmm)/)
        print "  " name " " fn ": " insn
    }')
  if [ -n "$bad" ]; then
    echo "$name uses the extended register state:"
    echo "$bad" | head -20
    return 1
  fi
}

mode=$1 except=$2
shift 2
IFS=',' read -r -a srcs <<< "$(case "$mode" in objects) echo "$1" ;; clang) echo "$3" ;; esac)"
fail=0
case "$mode" in
objects)
  shift
  for s in "${srcs[@]}"; do
    obj=""
    for o in "$@"; do [[ "$o" == */"$s".o ]] && obj=$o; done
    [ -n "$obj" ] || { echo "no object for $s among the target's"; exit 1; }
    check "$obj" "$s" || fail=1
  done
  ;;
clang)
  clangxx=$1 srcdir=$2
  shift 3
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  for s in "${srcs[@]}"; do
    obj=$tmp/$(echo "$s" | tr / _).o
    if ! "$clangxx" "$@" -c "$srcdir/$s" -o "$obj" 2>"$tmp/err"; then
      echo "clang does not build $s:"
      grep -m 10 'error' "$tmp/err" || cat "$tmp/err"
      fail=1
      continue
    fi
    check "$obj" "$s" || fail=1
  done
  ;;
*)
  echo "usage: $0 objects|clang ..." >&2
  exit 2
  ;;
esac
exit $fail
