#!/usr/bin/env bash
# See boundary.cmake.
set -euo pipefail
case "$1" in
exports)
  lib=$2 agent=$3 map=$4
  bad=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^utramp_' || true)
  if [ -n "$bad" ]; then echo "libutramp.so exports more than the C API:"; echo "$bad"; exit 1; fi
  nm -D --defined-only "$lib" | grep -q ' utramp_attach$' || { echo "libutramp.so lacks utramp_attach"; exit 1; }
  want=$(sed -n 's/^ *\([a-z_]*\);$/\1/p' "$map" | sort)
  got=$(nm -D --defined-only "$agent" | awk '{print $3}' | sed 's/@.*//' | sort)
  if [ "$want" != "$got" ]; then
    echo "libutramp-agent.so exports:"; echo "$got"; echo "expected (agent.map):"; echo "$want"; exit 1
  fi
  ;;
ctors)
  shift
  fail=0
  for o in "$@"; do
    if nm "$o" | grep -q '_GLOBAL__sub_I_'; then
      echo "$o: a namespace-scope variable needs a constructor at load time:"
      nm -C "$o" | grep -E ' [bBdD] ' | head -20
      fail=1
    fi
  done
  exit $fail
  ;;
esac
