#!/usr/bin/env python3
"""Decoding speed: pubjson against pgoutput, wal2json and test_decoding.

Builds workloads on the benchmark cluster, creates every slot before the
workload (so all of them decode the same WAL), then times
pg_logical_slot_peek_[binary_]changes over that WAL, best of N runs
(interleaved across decoders), and prints each time and the ratios to
pgoutput and wal2json from the same run. Then the walsender path, the
one production consumers use: pg_recvlogical streams a copy of each slot
up to the end of the workload into a file (best of N again).
Absolute times depend on the machine; the ratios are what to compare.

Usage: bench/decode_bench.py [--runs 3] [--scale 1.0] [--workload NAME ...]
                              [--against LIB] [--floor]
Needs PGHOST/PGPORT/PGUSER (scripts/cluster.sh env) and the plugins installed.
--against LIB times another build of pubjson (its libpubjson.so) beside this
one, as the plugin pubjson_base, in the same interleaved runs over the same
WAL, and prints each format's time against it: a before/after in one run.
--floor adds bench/floor's plugin (built with PGXS), which writes as many
bytes in as many batched messages as a format, without encoding anything:
what PostgreSQL itself needs to hand those bytes over, through the SQL
functions and a walsender, timed in the same interleaved runs.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

PG_BIN = os.environ.get("PUBJSON_PG_BIN", "/usr/lib/postgresql/15/bin")
PSQL = os.path.join(PG_BIN, "psql")
RECVLOGICAL = os.path.join(PG_BIN, "pg_recvlogical")
DB = "pubjson_bench"


def psql(sql, db=DB, timing=False):
    cmd = [PSQL, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", db]
    if timing:
        # Keep the SQL function's result tuplestore in memory: otherwise the
        # benchmark measures temp-file writes, proportional to output size.
        sql = "SET work_mem = '4GB';\n\\timing on\n" + sql
    out = subprocess.run(cmd, input=sql, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"psql failed: {out.stderr.strip()}\n{sql[:500]}")
    return out.stdout


WORKLOADS = {
    # name: (table DDL, workload SQL); {n} scales the row counts.
    "mixed": (
        "CREATE TABLE t (id int PRIMARY KEY, name text, amount numeric(12,2), created timestamptz,"
        " flag bool, doc jsonb)",
        """
        DO $$ BEGIN
          FOR b IN 0..{batches}-1 LOOP
            INSERT INTO t SELECT i, 'name ' || i, i * 1.25, '2026-01-01'::timestamptz + i * interval '1 s',
                   i % 2 = 0, jsonb_build_object('k', i, 'tag', 'x' || i)
              FROM generate_series(b * 1000 + 1, b * 1000 + 1000) i;
            COMMIT;
          END LOOP;
        END $$;
        UPDATE t SET amount = amount + 1, flag = NOT flag WHERE id <= {updates};
        DELETE FROM t WHERE id <= {deletes};
        """,
    ),
    "wide": (
        "CREATE TABLE t (id int PRIMARY KEY, "
        + ", ".join(f"c{i} {'int8' if i % 3 == 0 else 'text' if i % 3 == 1 else 'numeric'}" for i in range(40))
        + ")",
        """
        DO $$ BEGIN
          FOR b IN 0..({batches}/4)-1 LOOP
            INSERT INTO t SELECT i, """
        + ", ".join(
            f"{'i' if i % 3 == 0 else chr(39) + 'value ' + chr(39) + ' || i' if i % 3 == 1 else 'i / 7.0'}"
            for i in range(40)
        )
        + """
              FROM generate_series(b * 1000 + 1, b * 1000 + 1000) i;
            COMMIT;
          END LOOP;
        END $$;
        """,
    ),
    # 20,000 rows of 6.4 kB at scale 1, so that the default run decodes for
    # about as long as the others (at 1,000 rows it took 10 ms, and its
    # ratios moved by a tenth from run to run).
    "toast": (
        "CREATE TABLE t (id int PRIMARY KEY, note text, body text)",
        """
        ALTER TABLE t ALTER COLUMN body SET STORAGE EXTERNAL;
        DO $$ BEGIN
          FOR b IN 0..{batches}-1 LOOP
            INSERT INTO t SELECT i, 'n' || i, repeat(md5(i::text), 200)
              FROM generate_series(b * 100 + 1, b * 100 + 100) i;
            COMMIT;
          END LOOP;
        END $$;
        UPDATE t SET note = 'changed' WHERE id % 2 = 0;
        """,
    ),
}

# (label, plugin, SQL function, options)
DECODERS = [
    ("floor (pgoutput, empty publication)", "pgoutput", "binary", "'proto_version','1','publication_names','bench_empty'"),
    ("pgoutput", "pgoutput", "binary", "'proto_version','1','publication_names','bench_all'"),
    ("test_decoding", "test_decoding", "text", "'include-xids','0'"),
    ("wal2json format 1", "wal2json", "text", "'format-version','1'"),
    ("wal2json format 2", "wal2json", "text", "'format-version','2'"),
    ("pubjson format 1", "pubjson", "text", "'format-version','1'"),
    ("pubjson format 2", "pubjson", "text", "'format-version','2'"),
    ("pubjson format 2, publication", "pubjson", "text", "'format-version','2','publication_names','bench_all'"),
    ("pubjson format 2, row filter", "pubjson", "text", "'format-version','2','publication_names','bench_filtered'"),
    # 64 kB batches on both paths (the default).
    ("pubjson format 3", "pubjson", "text", "'format-version','3'"),
    # One object per message on both paths.
    ("pubjson format 3, batch-bytes 0", "pubjson", "text", "'format-version','3','batch-bytes','0'"),
    ("pubjson format 3, publication", "pubjson", "text", "'format-version','3','publication_names','bench_all'"),
    # Debezium's change events (64 kB batches), the JSON converter without
    # and with schemas.
    ("pubjson debezium", "pubjson", "text", "'format-version','debezium','topic.prefix','bench','schemas.enable','false'"),
    ("pubjson debezium, schemas", "pubjson", "text", "'format-version','debezium','topic.prefix','bench'"),
]


def wal2json_installed():
    """LOAD fails where the server has no (loadable) wal2json: the
    PostgreSQL 16-18 builds of scripts/build-pg.sh."""
    cmd = [PSQL, "-X", "-q", "-At", "-d", "postgres", "-c", "LOAD 'wal2json'"]
    return subprocess.run(cmd, capture_output=True, text=True).returncode == 0


def slot_name(i):
    return f"bench_{i}"


def run_workload(name, scale):
    ddl, work = WORKLOADS[name]
    psql(f"DROP DATABASE IF EXISTS {DB}", db="postgres")
    psql(f"CREATE DATABASE {DB}", db="postgres")
    psql(ddl + ";\nCREATE PUBLICATION bench_all FOR TABLE t;\n"
         "CREATE PUBLICATION bench_filtered FOR TABLE t WHERE (id > 0);\n"
         "CREATE PUBLICATION bench_empty;\n")
    for i, (_, plugin, _, _) in enumerate(DECODERS):
        psql(f"SELECT pg_create_logical_replication_slot('{slot_name(i)}', '{plugin}')")
    batches = max(int(200 * scale), 4)
    psql(work.format(batches=batches, updates=int(100000 * scale), deletes=int(50000 * scale)))
    psql("CHECKPOINT")


def time_decoder_once(i, kind, options):
    fn = "pg_logical_slot_peek_binary_changes" if kind == "binary" else "pg_logical_slot_peek_changes"
    sql = f"SELECT count(*), coalesce(sum(octet_length(data)), 0) FROM {fn}('{slot_name(i)}', NULL, NULL, {options});"
    out = psql(sql, timing=True)
    m = re.search(r"Time: ([0-9.]+) ms", out)
    if not m:
        sys.exit(f"no timing in: {out}")
    return float(m.group(1)) / 1000.0, out.splitlines()[0]


def time_decoders(runs):
    """Best of `runs` per decoder. The runs are interleaved (every decoder
    once, then again), so that load from elsewhere on the machine during
    the measurement falls on all decoders alike instead of on whichever
    happened to be timed then."""
    best = [None] * len(DECODERS)
    rows = [None] * len(DECODERS)
    for _ in range(runs):
        for i, (_, _, kind, options) in enumerate(DECODERS):
            seconds, rows[i] = time_decoder_once(i, kind, options)
            best[i] = seconds if best[i] is None else min(best[i], seconds)
    return best, rows


def recvlogical_options(options):
    """The SQL functions' option list as pg_recvlogical's -o name=value."""
    items = re.findall(r"'([^']*)'", options)
    args = []
    for name, value in zip(items[::2], items[1::2]):
        args += ["-o", f"{name}={value}"]
    return args


def time_walsender_once(i, options, endpos, scratch):
    """Streams a copy of slot i up to endpos into a file through a
    walsender; returns (seconds, bytes)."""
    copy = f"{slot_name(i)}_w"
    psql(f"SELECT pg_copy_logical_replication_slot('{slot_name(i)}', '{copy}')")
    out = os.path.join(scratch, f"{copy}.out")
    cmd = [RECVLOGICAL, "-d", DB, "-S", copy, "--start", "--no-loop", "-E", endpos, "-F", "0",
           "-f", out] + recvlogical_options(options)
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - started
    psql(f"SELECT pg_drop_replication_slot('{copy}')")
    if done.returncode != 0:
        sys.exit(f"pg_recvlogical failed: {done.stderr.strip()}")
    size = os.path.getsize(out)
    os.unlink(out)
    return seconds, size


def time_walsenders(runs):
    """Best of `runs` per decoder through pg_recvlogical, interleaved."""
    endpos = psql("SELECT pg_current_wal_insert_lsn()").strip()
    best = [None] * len(DECODERS)
    sizes = [None] * len(DECODERS)
    with tempfile.TemporaryDirectory(prefix="pubjson-bench-") as scratch:
        os.chmod(scratch, 0o777)
        for _ in range(runs):
            for i, (_, _, _, options) in enumerate(DECODERS):
                seconds, sizes[i] = time_walsender_once(i, options, endpos, scratch)
                best[i] = seconds if best[i] is None else min(best[i], seconds)
    return best, sizes


def drop_slots():
    for i in range(len(DECODERS)):
        psql(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '{slot_name(i)}'",
             db="postgres")


BASE = "pubjson_base"
# The formats --against times in both builds.
AGAINST = ["pubjson format 1", "pubjson format 2", "pubjson format 3", "pubjson debezium",
           "pubjson debezium, schemas"]


def add_base(lib):
    """Loads `lib` as the output plugin pubjson_base (from the private
    library directory scripts/bench.sh gives the server) and times its
    formats (AGAINST) beside this build's."""
    libdir = os.environ.get("PUBJSON_LIBDIR")
    if not libdir:
        sys.exit("--against needs the private library directory of scripts/bench.sh (PUBJSON_LIBDIR)")
    shutil.copyfile(lib, os.path.join(libdir, BASE + ".so"))
    plugins = psql("SHOW output_plugin_libraries", db="postgres").strip()
    psql(f"ALTER SYSTEM SET output_plugin_libraries = {plugins}, {BASE}", db="postgres")
    psql("SELECT pg_reload_conf()", db="postgres")
    # New backends see the setting once the postmaster has reloaded.
    deadline = time.monotonic() + 30
    while BASE not in psql("SHOW output_plugin_libraries", db="postgres"):
        if time.monotonic() > deadline:
            sys.exit("the server did not take the new output_plugin_libraries within 30 s")
        time.sleep(0.1)
    for label, _, kind, options in list(DECODERS):
        if label in AGAINST:
            DECODERS.append((label.replace("pubjson", BASE, 1), BASE, kind, options))


FLOOR = "pubjson_floor"
# The formats whose bytes the floor writes: (label, batch-bytes). Format 2
# writes a message per change; the others batch 64 kB.
FLOOR_OF = [("pubjson format 2", 0), ("pubjson debezium", 65536), ("pubjson debezium, schemas", 65536)]


def add_floor():
    """Builds bench/floor's plugin for this server and loads it from the
    benchmark's private library directory, as pubjson_floor."""
    libdir = os.environ.get("PUBJSON_LIBDIR")
    if not libdir:
        sys.exit("--floor needs the private library directory of scripts/bench.sh (PUBJSON_LIBDIR)")
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor")
    pg_config = os.path.join(PG_BIN, "pg_config")
    done = subprocess.run(["make", "-s", "-C", here, f"PG_CONFIG={pg_config}"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"building bench/floor failed: {done.stderr.strip()}")
    shutil.copyfile(os.path.join(here, FLOOR + ".so"), os.path.join(libdir, FLOOR + ".so"))
    plugins = psql("SHOW output_plugin_libraries", db="postgres").strip()
    if FLOOR not in plugins:
        psql(f"ALTER SYSTEM SET output_plugin_libraries = {plugins}, {FLOOR}", db="postgres")
        psql("SELECT pg_reload_conf()", db="postgres")
    deadline = time.monotonic() + 30
    while FLOOR not in psql("SHOW output_plugin_libraries", db="postgres"):
        if time.monotonic() > deadline:
            sys.exit("the server did not take the new output_plugin_libraries within 30 s")
        time.sleep(0.1)


def floor_decoders(rows):
    """The floor's decoders for this workload: the changes counted by the
    floor itself (one byte each), each format's bytes from its peek."""
    i = [d[0] for d in DECODERS].index("floor: changes")
    changes = int(psql(f"SELECT count(*) FROM pg_logical_slot_peek_changes('{slot_name(i)}', NULL, NULL, "
                       f"'total-bytes', '0', 'batch-bytes', '0')").strip())
    out = []
    for label, batch in FLOOR_OF:
        total = int(rows[[d[0] for d in DECODERS].index(label)].split("|")[1])
        out.append((f"floor: {label}'s bytes", FLOOR, "text",
                    f"'total-bytes','{total}','changes','{changes}','batch-bytes','{batch}'"))
    return out


def print_against(times, walsender):
    """This build's formats against pubjson_base's, both paths."""
    print(f"\n-- against {BASE} (same runs; each format with its defaults)")
    print(f"{'format':28} {'peek':>8} {'base':>8} {'ratio':>7} {'walsender':>10} {'base':>8} {'ratio':>7}")
    for this in AGAINST:
        base = this.replace("pubjson", BASE, 1)
        print(f"{this:28} {times[this]:8.3f} {times[base]:8.3f} {times[this] / times[base]:7.3f} "
              f"{walsender[this]:10.3f} {walsender[base]:8.3f} {walsender[this] / walsender[base]:7.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--workload", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--against", metavar="LIB", help="another build's libpubjson.so, timed beside this one")
    ap.add_argument("--floor", action="store_true", help="also time bench/floor's plugin with each format's bytes")
    args = ap.parse_args()
    global DECODERS
    with_wal2json = wal2json_installed()
    if not with_wal2json:
        print("wal2json is not installed for this server: compared with pgoutput and test_decoding only")
        DECODERS = [d for d in DECODERS if d[1] != "wal2json"]
    if args.against:
        add_base(args.against)
    if args.floor:
        add_floor()
        # Its slots are made with the others (the same WAL); the options
        # are set once the formats' bytes are known.
        DECODERS.append(("floor: changes", FLOOR, "text", "'total-bytes','0'"))
        DECODERS.extend((f"floor: {label}'s bytes", FLOOR, "text", "") for label, _ in FLOOR_OF)
    for name in args.workload:
        drop_slots()
        run_workload(name, args.scale)
        if args.floor:
            # The formats first, for their bytes; then everything, as usual.
            measured = [i for i, d in enumerate(DECODERS) if d[0] in dict(FLOOR_OF)]
            rows = [None] * len(DECODERS)
            for i in measured:
                _, rows[i] = time_decoder_once(i, DECODERS[i][2], DECODERS[i][3])
            for (label, plugin, kind, options) in floor_decoders(rows):
                DECODERS[[d[0] for d in DECODERS].index(label)] = (label, plugin, kind, options)
        best, rows = time_decoders(args.runs)
        results = [(label, best[i], rows[i]) for i, (label, _, _, _) in enumerate(DECODERS)]
        walsender, sizes = time_walsenders(args.runs)
        drop_slots()
        times = {label: s for label, s, _ in results}
        pgoutput = times["pgoutput"]
        wal2json = times.get("wal2json format 2")
        print(f"\n== workload '{name}' (scale {args.scale}, best of {args.runs})")
        print(f"{'decoder':40} {'seconds':>8} {'/pgoutput':>10} {'/wal2json2' if wal2json else '':>11}  rows|bytes")
        for label, seconds, rows in results:
            vs_wal2json = f"{seconds / wal2json:11.2f}" if wal2json else " " * 11
            print(f"{label:40} {seconds:8.3f} {seconds / pgoutput:10.2f} {vs_wal2json}  {rows}")
        f1, f2 = times["pubjson format 1"], times["pubjson format 2"]
        filt, unfilt = times["pubjson format 2, row filter"], times["pubjson format 2, publication"]
        vs_wal2json = f"wal2json v2/pubjson v2 = {wal2json / f2:.2f} (>= 2.5), " if wal2json else ""
        print(f"targets: pubjson v2/pgoutput = {f2 / pgoutput:.2f} (<= 1.0), {vs_wal2json}"
              f"row filter overhead = {100 * (filt / unfilt - 1):+.1f}% (<= 10%), "
              f"v1/v2 = {100 * (f1 / f2 - 1):+.1f}% (<= 10%)")
        w = {label: (walsender[i], sizes[i]) for i, (label, _, _, _) in enumerate(DECODERS)}
        w_wal2json = w["wal2json format 2"][0] if wal2json else None
        print(f"\n-- walsender (pg_recvlogical to a file, best of {args.runs})")
        print(f"{'decoder':40} {'seconds':>8} {'/pgoutput':>10} {'/wal2json2' if w_wal2json else '':>11} "
              f"{'bytes':>12} {'/pgoutput':>10}")
        for label, _, _, _ in DECODERS:
            seconds, size = w[label]
            vs_wal2json = f"{seconds / w_wal2json:11.2f}" if w_wal2json else " " * 11
            print(f"{label:40} {seconds:8.3f} {seconds / w['pgoutput'][0]:10.2f} {vs_wal2json} {size:12d} "
                  f"{size / max(w['pgoutput'][1], 1):10.2f}")
        f3_bytes = sizes[[d[0] for d in DECODERS].index("pubjson format 3")]
        f2_bytes = sizes[[d[0] for d in DECODERS].index("pubjson format 2")]
        f3_unbatched = times["pubjson format 3, batch-bytes 0"]
        # Format 3's targets (issue 28): 0.5 of format 2's bytes and 0.60 of
        # pgoutput's time on the mixed workload, 0.8 of its time on wide
        # rows and TOAST, where the bytes have no target.
        time_target = "0.60" if name == "mixed" else "0.8"
        bytes_target = " (<= 0.5)" if name == "mixed" else ""
        print(f"targets: v3 bytes/v2 bytes = {f3_bytes / f2_bytes:.2f}{bytes_target}, "
              f"v3/pgoutput via peek = {times['pubjson format 3'] / pgoutput:.2f} (<= {time_target}; "
              f"one object per row {f3_unbatched / pgoutput:.2f}), "
              f"v3/pgoutput via walsender = {w['pubjson format 3'][0] / w['pgoutput'][0]:.2f} (<= {time_target}), "
              f"floor/pgoutput via walsender = "
              f"{w['floor (pgoutput, empty publication)'][0] / w['pgoutput'][0]:.2f}")
        # The Debezium format's targets (issue 44): schemas off at most
        # format 2's time, schemas on at most 1.5 times it, on both paths.
        dbz, dbz_schemas = times["pubjson debezium"], times["pubjson debezium, schemas"]
        w_f2 = w["pubjson format 2"][0]
        print(f"targets: debezium/v2 via peek = {dbz / f2:.2f} (<= 1.0), with schemas {dbz_schemas / f2:.2f} "
              f"(<= 1.5); via walsender = {w['pubjson debezium'][0] / w_f2:.2f} (<= 1.0), with schemas "
              f"{w['pubjson debezium, schemas'][0] / w_f2:.2f} (<= 1.5)")
        if args.against:
            print_against(times, {label: w[label][0] for label in w})
        if args.floor:
            print(f"\n-- the floor: PostgreSQL handing over each format's bytes, nothing encoded")
            print(f"{'format':28} {'peek':>8} {'floor':>8} {'ratio':>7} {'walsender':>10} {'floor':>8} {'ratio':>7}")
            for label, _ in FLOOR_OF:
                floor = f"floor: {label}'s bytes"
                print(f"{label:28} {times[label]:8.3f} {times[floor]:8.3f} {times[label] / times[floor]:7.2f} "
                      f"{w[label][0]:10.3f} {w[floor][0]:8.3f} {w[label][0] / w[floor][0]:7.2f}")
            floor_f2 = times["floor: pubjson format 2's bytes"]
            w_floor_f2 = w["floor: pubjson format 2's bytes"][0]
            for label in ("pubjson debezium", "pubjson debezium, schemas"):
                floor = f"floor: {label}'s bytes"
                print(f"floor of {label} / format 2's time: peek {times[floor] / f2:.2f}, "
                      f"walsender {w[floor][0] / w_f2:.2f}; / format 2's floor: peek {times[floor] / floor_f2:.2f}, "
                      f"walsender {w[floor][0] / w_floor_f2:.2f}")


if __name__ == "__main__":
    main()
