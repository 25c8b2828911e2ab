#!/usr/bin/env bash
# See boundary.cmake.
set -euo pipefail
case "$1" in
exports)
  lib=$2 agent=$3 map=$4
  bad=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^utramp_' || true)
  if [ -n "$bad" ]; then echo "libutramp.so exports more than the C API:"; echo "$bad"; exit 1; fi
  nm -D --defined-only "$lib" | grep -q ' utramp_attach$' || { echo "libutramp.so lacks utramp_attach"; exit 1; }
  want=$(sed -n 's/^ *\([A-Za-z_]*\);$/\1/p' "$map" | sort)
  got=$(nm -D --defined-only "$agent" | awk '{print $3}' | sed 's/@.*//' | sort)
  if [ "$want" != "$got" ]; then
    echo "libutramp-agent.so exports:"; echo "$got"; echo "expected (agent.map):"; echo "$want"; exit 1
  fi
  ;;
ctors)
  shift
  # One nm for all objects; -A names the object on each line.
  bad=$(nm -A "$@" | grep '_GLOBAL__sub_I_' || true)
  if [ -n "$bad" ]; then
    echo "a namespace-scope variable needs a constructor at load time in:"
    echo "$bad" | sed 's/:.*//' | sort -u
    exit 1
  fi
  ;;
tls)
  # The agent's thread-local storage (its PT_TLS segment's MemSiz) must fit in what a
  # library loaded by dlopen into a running process gets: glibc's reserve
  # (glibc.rtld.optional_static_tls, 512 bytes by default) shared with every other
  # such library. Large per-thread state is mapped on first use instead
  # (os/thread_memory.hpp, tramp/threads.hpp); docs/attach.md.
  agent=$2 budget=$3
  size=$(readelf -lW "$agent" | awk '$1 == "TLS" { print $6 }')
  [ -n "$size" ] || size=0x0
  if [ $((size)) -gt "$budget" ]; then
    echo "libutramp-agent.so has $((size)) bytes of thread-local storage, more than its budget of $budget:"
    readelf -sW "$agent" | awk '$4 == "TLS"' | sort -k3 -n -r
    exit 1
  fi
  echo "libutramp-agent.so: $((size)) bytes of thread-local storage (budget $budget)"
  ;;
layers)
  # Every #include "LAYER/..." of a file in src/ME/ names ME or a layer below it, in the
  # order of the block under "## Layers" of docs/architecture.md (its unindented lines'
  # first words, top first). The one allowed exception is described under the block.
  doc=$2 src=$3
  order=$(awk '/^## Layers/ { f = 1 } f && /^```/ { n++; next } f && n == 1 && /^[a-z]/ { print $1 } n >= 2 { exit }' "$doc" | sed 's|.*/||')
  [ "$(echo "$order" | wc -l)" -ge 10 ] || { echo "no layer block found in $doc"; exit 1; }
  rank() { echo "$order" | grep -nx "$1" | cut -d: -f1; }
  bad=0
  while IFS= read -r hit; do
    file=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}
    me=${file#"$src"/}; me=${me%%/*}
    dep=$(echo "$rest" | sed -n 's|^[0-9]*:[[:space:]]*#[[:space:]]*include[[:space:]]*"\([a-z_0-9]*\)/.*|\1|p')
    [ -n "$dep" ] && [ "$dep" != "$me" ] || continue
    rm_=$(rank "$me"); rd=$(rank "$dep")
    [ -n "$rm_" ] && [ -n "$rd" ] || continue
    [ "$rd" -gt "$rm_" ] && continue
    case "${file#"$src"/}:$dep" in
      arch/bpf_jit.hpp:ebpf | arch/x86_64/bpf_jit.cpp:ebpf) continue ;;
    esac
    echo "${file#"$src"/}:$line includes $dep/, a layer above $me/"
    bad=1
  done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_0-9]+/' "$src" --include='*.cpp' --include='*.hpp' --include='*.h' --include='*.c' --include='*.inc' --include='*.S')
  [ $bad = 0 ] || { echo "(docs/architecture.md, \"Layers\": each layer uses only the ones below it)"; exit 1; }
  echo "layers: $(echo "$order" | tr '\n' ' ')- every include points down"
  ;;
lean)
  # The CLI and the agent load what every command needs and no more: the HTTP server of
  # `run --metrics` (cpp-httplib, and through it OpenSSL and brotli: 7 ms of every
  # start-up) is a library of its own, loaded by that command alone (metrics_http.hpp);
  # libbpf is loaded when an eBPF object is read (src/ebpf/libbpf.hpp), not by every
  # program `record` traces.
  # The CLI attaches nothing in its own process, so it does not make the probe and
  # trampoline managers when it loads (their fork and exit handlers); the shared copies
  # of the runtime do (src/probe/managers_early.cpp).
  shift
  for f in "$@"; do
    bad=$(ldd "$f" | grep -E 'libcpp-httplib|libssl|libcrypto|libbrotli|libbpf' || true)
    if [ -n "$bad" ]; then echo "$(basename "$f") loads libraries only some commands need:"; echo "$bad"; exit 1; fi
  done
  cli=$1 agent=$2
  if nm "$cli" | grep make_managers_early >/dev/null; then
    echo "$(basename "$cli") makes the runtime's managers when it loads (src/probe/managers_early.cpp is for the shared copies)"
    exit 1
  fi
  nm "$agent" | grep make_managers_early >/dev/null || { echo "$(basename "$agent") does not make the managers when it loads"; exit 1; }
  ;;
esac
