#!/usr/bin/env bash
# The long sweep behind tests/ipa_ra (not run by CI): tests/ipa_ra/ipa_fixture.c built
# by gcc and clang with more flag sets than CI's six (-Os, -march=native for the AVX
# registers, frame pointers, unrolling, CET landing pads) and in every site flavour
# (none: a relocated prologue; -fpatchable-function-entry=5; -pg -mfentry), each binary
# run untraced and then under every way utramp runs code around a call, REPEATS times,
# its checksum compared each time with the untraced run. Prints one line per run that
# differs, and a count; exits non-zero when any did.
#
#   scripts/ipa_ra_sweep.sh [BUILD_DIR] [REPEATS]     # defaults: build 3
#   IPA_SWEEP_CCS=gcc IPA_SWEEP_FLAGS=-O2 scripts/ipa_ra_sweep.sh build 1   # a quick one
#
# BUILD_DIR must hold a build of this tree (the CLI, libutramp, examples/bpf).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=$(cd "${1:-build}" && pwd)
repeats=${2:-3}
cli=$build/tools/utramp/utramp
lib=$build/src
bpf=$build/examples/bpf/latency.bpf.o
for f in "$cli" "$lib/libutramp.so"; do
  [[ -e $f ]] || { echo "ipa_ra_sweep: $f missing: build the tree first" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/utramp-ipa-sweep.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"  # -pg binaries write gmon.out into the working directory

flag_sets=("-O1" "-O2" "-O3" "-Os" "-O2 -march=native" "-O2 -fno-omit-frame-pointer"
           "-O3 -funroll-loops" "-O2 -fcf-protection=full")
[[ -n ${IPA_SWEEP_FLAGS:-} ]] && flag_sets=("$IPA_SWEEP_FLAGS")
site_sets=("" "-fpatchable-function-entry=5" "-pg -mfentry")
ways=(capi record record_no_inline record_general record_args record_function_tracer run_bpf)

checksum() { sed -n 's/^checksum //p' <<<"$1" | head -1; }

# run_way WAY BIN: prints the checksums the traced run printed (capi: one per mode).
run_way() {
  local way=$1 bin=$2 out
  local rec=(-q -o "$work/trace")
  rm -rf "$work/trace"
  case $way in
    # With a compiler site utramp keeps the ABI's registers only, which leave out the
    # MXCSR status flags: there the C-API programs raise no FP exception.
    capi) out=$(timeout 120 "$bin" "$capi_mode") || return 1
          awk '{print $2}' <<<"$out" | tail -n +2; return 0 ;;
    record) out=$(timeout 120 "$cli" record "${rec[@]}" -- "$bin" run) ;;
    record_no_inline)
      out=$(UTRAMP_NO_INLINE_TRACER=1 timeout 120 "$cli" record "${rec[@]}" -- "$bin" run) ;;
    record_general) out=$(timeout 120 "$cli" record "${rec[@]}" -t 1ns -- "$bin" run) ;;
    record_args) out=$(timeout 120 "$cli" record "${rec[@]}" -A work@arg1 -A many@arg1,arg6 \
                         -R mix3 -R fmr -- "$bin" run) ;;
    record_function_tracer)
      out=$(timeout 120 "$cli" record "${rec[@]}" --tracer function -- "$bin" run) ;;
    run_bpf) [[ -e $bpf ]] || { echo skip; return 0; }
             out=$(timeout 120 "$cli" run "$bpf" -- "$bin" run) ;;
  esac || return 1
  checksum "$out"
}

runs=0 bad=0
for cc in ${IPA_SWEEP_CCS:-gcc clang}; do
  command -v "$cc" >/dev/null || { echo "ipa_ra_sweep: no $cc, skipped"; continue; }
  for flags in "${flag_sets[@]}"; do
    for site in "${site_sets[@]}"; do
      bin=$work/fx
      # shellcheck disable=SC2086  # the flag sets are word lists
      if ! "$cc" $flags $site -fPIE -pie -I"$root/include" -o "$bin" \
          "$root/tests/ipa_ra/ipa_fixture.c" -L"$lib" -lutramp -lm -Wl,-rpath,"$lib" 2>/dev/null; then
        echo "skip: $cc $flags $site (does not build)"
        continue
      fi
      expected=$(checksum "$("$bin" run)")
      capi_mode=capi
      [[ -n $site ]] && capi_mode=capi-abi
      for way in "${ways[@]}"; do
        for ((r = 0; r < repeats; ++r)); do
          runs=$((runs + 1))
          if ! got=$(run_way "$way" "$bin" 2>"$work/err"); then
            bad=$((bad + 1))
            echo "FAIL $cc $flags [$site] $way: exit/timeout: $(tail -3 "$work/err" | tr '\n' ' ')"
            continue
          fi
          [[ $got == skip ]] && continue
          while read -r v; do
            if [[ $v != "$expected" ]]; then
              bad=$((bad + 1))
              echo "FAIL $cc $flags [$site] $way: checksum $v, untraced $expected"
            fi
          done <<<"$got"
        done
      done
      rm -f "$work/gmon.out"
    done
  done
done
echo "ipa_ra_sweep: $runs runs, $bad differing"
[[ $bad -eq 0 ]]
