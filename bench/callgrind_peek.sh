#!/usr/bin/env bash
# Instructions, not seconds: an A/B of two builds of pubjson that the
# machine's load does not change. Counts with callgrind the instructions a
# single-user backend executes for one pg_logical_slot_peek_changes over the
# same WAL, per format, for this build (plugin pubjson) and another
# (pubjson_base, its libpubjson.so given as LIB), minus a backend that only
# runs SELECT 1.
#   bench/callgrind_peek.sh LIB [--workload mixed|wide|toast] [--scale F]
#                               [--format F ...] [--keep DIR]
# --format: 1, 2, 3, debezium, debezium-schemas (default 1 2 3); --keep DIR
# keeps this build's callgrind files (callgrind_annotate DIR/FORMAT.out).
# Runs on the benchmark's cluster (scripts/bench.sh's; run `scripts/bench.sh
# speed --against LIB --runs 1` once first: it installs both libraries in
# its private directory and sets output_plugin_libraries), which it stops
# for the single-user backends and leaves stopped. Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/pg-env.sh
. scripts/pg-env.sh
lib=${1:?usage: $0 LIB [--workload NAME] [--scale F]}
shift
workload=mixed
scale=0.25
formats=()
keep=
while [ $# -gt 0 ]; do
  case "$1" in
    --workload) workload=$2; shift 2 ;;
    --scale) scale=$2; shift 2 ;;
    --format) formats+=("$2"); shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ ${#formats[@]} -gt 0 ] || formats=(1 2 3)
# A format's options for pg_logical_slot_peek_changes.
format_options() {
  case "$1" in
    debezium) echo "'format-version', 'debezium', 'topic.prefix', 'bench', 'schemas.enable', 'false'" ;;
    debezium-schemas) echo "'format-version', 'debezium', 'topic.prefix', 'bench'" ;;
    *) echo "'format-version', '$1'" ;;
  esac
}
command -v valgrind >/dev/null || { echo "valgrind is needed (apt install valgrind)" >&2; exit 1; }
bench_root=${PUBJSON_TMP:-/tmp}/pubjson-bench
export PUBJSON_PGDATA=$bench_root/data PUBJSON_SOCKET=$bench_root/socket PUBJSON_PORT=54330
export PUBJSON_LIBDIR=$bench_root/lib PUBJSON_PRELOAD=0
[ -f "$PUBJSON_LIBDIR/pubjson_base.so" ] || { echo "run scripts/bench.sh speed --against LIB first" >&2; exit 1; }
install -m 755 "$lib" "$PUBJSON_LIBDIR/pubjson_base.so"
scripts/cluster.sh start >/dev/null
eval "$(scripts/cluster.sh env)"
db=pubjson_callgrind
psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
# The benchmark's workload, over both plugins' slots made before it.
python3 - "$workload" "$scale" "$db" <<'PY'
import importlib.util, subprocess, sys
spec = importlib.util.spec_from_file_location("decode_bench", "bench/decode_bench.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
name, scale, db = sys.argv[1], float(sys.argv[2]), sys.argv[3]
ddl, work = bench.WORKLOADS[name]
sql = work.format(batches=max(int(200 * scale), 4), updates=int(100000 * scale), deletes=int(50000 * scale))
bench.psql(ddl, db=db)
for slot, plugin in [("cg_new", "pubjson"), ("cg_base", "pubjson_base")]:
    bench.psql(f"SELECT pg_create_logical_replication_slot('{slot}', '{plugin}')", db=db)
bench.psql(sql, db=db)
bench.psql("CHECKPOINT", db=db)
PY
scripts/cluster.sh stop >/dev/null
postgres=$PG_BIN/postgres
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
chmod 777 "$out"
# instructions SQL [FILE]: the total Ir of a single-user backend running SQL
# (its callgrind file kept as FILE).
instructions() {
  local file=${2:-$out/cg.$RANDOM}
  printf '%s\n' "$1" | runuser -u postgres -- valgrind --tool=callgrind --callgrind-out-file="$file" \
    "$postgres" --single -D "$PUBJSON_PGDATA" -c "dynamic_library_path=$PUBJSON_LIBDIR:\$libdir" \
    -c work_mem=4GB "$db" >/dev/null 2>"$file.err" || { cat "$file.err" >&2; exit 1; }
  sed -n 's/^summary: //p' "$file" | awk '{print $1}'
}
baseline=$(instructions "SELECT 1;")
echo "== $workload, scale $scale: instructions of one peek (millions, minus a backend running SELECT 1)"
printf '%-18s %12s %12s %8s\n' format pubjson base ratio
if [ -n "$keep" ]; then mkdir -p "$keep" && chmod 777 "$keep"; fi
for format in "${formats[@]}"; do
  options=$(format_options "$format")
  kept=
  if [ -n "$keep" ]; then kept=$keep/$format.out; fi
  new=$(instructions "SELECT count(*) FROM pg_logical_slot_peek_changes('cg_new', NULL, NULL, $options);" $kept)
  base=$(instructions "SELECT count(*) FROM pg_logical_slot_peek_changes('cg_base', NULL, NULL, $options);")
  awk -v f="$format" -v n="$new" -v b="$base" -v z="$baseline" \
    'BEGIN { printf "%-18s %12.1f %12.1f %8.3f\n", f, (n - z) / 1e6, (b - z) / 1e6, (n - z) / (b - z) }'
done
