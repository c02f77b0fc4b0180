#!/bin/bash
# Runs every coverage-guided fuzz target of fuzz/ (cargo fuzz, libFuzzer,
# no sanitizer: the pure modules have no unsafe code) from its committed
# corpus. FUZZ_RUNS executions each (default 20000: the brief run of
# scripts/test.sh); the issue's long runs use FUZZ_RUNS=10000000.
# FUZZ_TARGETS picks some (default: all). New inputs that add coverage go
# to a scratch directory, unless FUZZ_GROW=1 adds them to fuzz/corpus/TARGET
# (then minimize with `cargo fuzz cmin -s none TARGET` before a commit). A
# failing input is kept in fuzz/artifacts/TARGET.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export PATH="$HOME/.cargo/bin:$PATH"
runs=${FUZZ_RUNS:-20000}
targets=${FUZZ_TARGETS:-$(cargo fuzz list)}
cargo fuzz build -s none
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for t in $targets; do
  mkdir -p "corpus/$t"
  # libFuzzer adds new inputs to the first directory it is given.
  dirs=("$scratch/$t" "corpus/$t")
  [ "${FUZZ_GROW:-0}" = 1 ] && dirs=("corpus/$t")
  mkdir -p "$scratch/$t"
  start=$(date +%s)
  if ! cargo fuzz run -s none "$t" "${dirs[@]}" -- -runs="$runs" -max_len=4096 \
      > "/tmp/pubjson-fuzz-$t.log" 2>&1; then
    tail -40 "/tmp/pubjson-fuzz-$t.log" >&2
    echo "fuzz target $t failed (input kept in fuzz/artifacts/$t)" >&2
    exit 1
  fi
  echo "$t: $runs runs in $(( $(date +%s) - start )) s from $(ls "corpus/$t" | wc -l) inputs"
done
