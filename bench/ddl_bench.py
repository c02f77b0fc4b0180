#!/usr/bin/env python3
"""DDL capture overhead: a DDL-heavy script with capture off and on.

A generated migration-like script of --commands DDL commands (CREATE
TABLE with a primary key, ALTER TABLE ... ADD COLUMN, DROP TABLE, each its
own transaction, about 30 tables alive at any time) is run by one psql
session, in the benchmark's own database, with pubjson's DDL capture off
(pubjson.disable_ddl_capture()) and on (pubjson.enable_ddl_capture()).
The runs are interleaved (off, on, off, on, ...) and the best of --runs
is kept for each, so load from elsewhere on the machine falls on both
alike. Every run ends with the tables it created dropped, and the catalogs
are vacuumed between runs, so each starts from the same state.

Printed: the seconds of each (wall clock, and the CPU time of the
session's backend, which the machine's load changes far less), their
ratios (the target is <= 1.5), and the
WAL each run wrote (pg_current_wal_insert_lsn() before and after), from
which the WAL capture adds per command. Then one more captured run with a
slot, decoded with format 3: every command must give one DDL object.

Usage: bench/ddl_bench.py [--runs 5] [--commands 10000]
Needs PGHOST/PGPORT/PGUSER and PUBJSON_PG_BIN (scripts/cluster.sh env) and
pubjson installed (scripts/bench.sh ddl does all of it).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

PG_BIN = os.environ.get("PUBJSON_PG_BIN", "/usr/lib/postgresql/15/bin")
PSQL = os.path.join(PG_BIN, "psql")
DB = "pubjson_bench_ddl"
SLOT = "bench_ddl"


def psql(sql, db=DB):
    cmd = [PSQL, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", db]
    out = subprocess.run(cmd, input=sql, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"psql failed: {out.stderr.strip()}\n{sql[:500]}")
    return out.stdout


def script(commands, live=30):
    """The DDL commands, in the order a long migration might run them:
    tables created, given a few columns over time, dropped, with about
    `live` tables existing at once. Exactly `commands` commands; every
    table is dropped at the end."""
    lines = []
    alive = []  # (name, columns added)
    serial = 0
    state = 0x2545F4914F6CDD1D

    def rand(n):
        nonlocal state
        state ^= (state << 13) & 0xFFFFFFFFFFFFFFFF
        state ^= state >> 7
        state ^= (state << 17) & 0xFFFFFFFFFFFFFFFF
        return state % n

    while len(lines) + len(alive) < commands:
        room = commands - len(lines) - len(alive)
        roll = rand(10)
        if (not alive or (len(alive) < live and roll < 4)) and room >= 2:
            serial += 1
            name = f"bench_t{serial}"
            lines.append(f"CREATE TABLE {name} (id bigint PRIMARY KEY, name text NOT NULL, created timestamptz);")
            alive.append([name, 0])
        elif roll < 8 or len(alive) < live // 2:
            table = alive[rand(len(alive))]
            table[1] += 1
            kind = ("integer", "text DEFAULT ''", "numeric(12,2)", "boolean NOT NULL DEFAULT false")[rand(4)]
            lines.append(f"ALTER TABLE {table[0]} ADD COLUMN c{table[1]} {kind};")
        else:
            name, _ = alive.pop(rand(len(alive)))
            lines.append(f"DROP TABLE {name};")
    for name, _ in alive:
        lines.append(f"DROP TABLE {name};")
    assert len(lines) == commands, len(lines)
    return "\n".join(lines) + "\n"


def wal_lsn():
    return psql("SELECT pg_current_wal_insert_lsn()").strip()


# The session's backend reports its own CPU time (utime + stime, in clock
# ticks) before and after the script: on a loaded machine the wall-clock
# time varies with what else runs, the backend's CPU time far less.
CPU_QUERY = "SELECT pg_catalog.pg_read_file('/proc/self/stat');\n"


def cpu_seconds(stat):
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_once(path, capture):
    """Runs the script once; returns (wall seconds, backend CPU seconds,
    WAL bytes, end LSN)."""
    psql("SELECT pubjson.enable_ddl_capture();" if capture else "SELECT pubjson.disable_ddl_capture();")
    psql("VACUUM pg_class, pg_attribute, pg_type, pg_depend, pg_index, pg_constraint, pg_attrdef;")
    before = wal_lsn()
    cmd = [PSQL, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", DB, "-f", path]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"the DDL script failed: {done.stderr.strip()[:1000]}")
    stats = [line for line in done.stdout.splitlines() if ")" in line]
    cpu = cpu_seconds(stats[-1]) - cpu_seconds(stats[0])
    after = wal_lsn()
    wal = int(psql(f"SELECT pg_wal_lsn_diff('{after}', '{before}')").strip())
    return seconds, cpu, wal, after


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--commands", type=int, default=10000)
    args = ap.parse_args()
    psql(f"SELECT pg_drop_replication_slot('{SLOT}') FROM pg_replication_slots WHERE slot_name = '{SLOT}'",
         db="postgres")
    psql(f"DROP DATABASE IF EXISTS {DB}", db="postgres")
    psql(f"CREATE DATABASE {DB}", db="postgres")
    psql("CREATE EXTENSION pubjson;")
    text = script(args.commands)
    counts = {tag: sum(1 for line in text.splitlines() if line.startswith(tag))
              for tag in ("CREATE TABLE", "ALTER TABLE", "DROP TABLE")}
    best = {False: None, True: None}
    best_cpu = {False: None, True: None}
    wal = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="pubjson-ddl-bench-") as scratch:
        os.chmod(scratch, 0o755)
        path = os.path.join(scratch, "ddl.sql")
        with open(path, "w") as f:
            f.write(CPU_QUERY + text + CPU_QUERY)
        os.chmod(path, 0o644)
        # A warm-up run of each, not counted (first catalog growth, caches).
        run_once(path, False)
        run_once(path, True)
        for _ in range(args.runs):
            for capture in (False, True):
                seconds, cpu, bytes_, _ = run_once(path, capture)
                print(f"capture {'on ' if capture else 'off'}: {seconds:.3f} s, backend CPU {cpu:.2f} s, "
                      f"{bytes_} WAL bytes", flush=True)
                best[capture] = seconds if best[capture] is None else min(best[capture], seconds)
                best_cpu[capture] = cpu if best_cpu[capture] is None else min(best_cpu[capture], cpu)
                wal[capture].append(bytes_)
        # One more captured run with a slot (created only now, so that it
        # held back no WAL before), decoded once: one DDL object per command.
        psql(f"SELECT pg_create_logical_replication_slot('{SLOT}', 'pubjson')")
        seconds_decoded, _, _, end = run_once(path, True)
    started = time.monotonic()
    objects = int(psql(
        f"SELECT count(*) FROM pg_logical_slot_get_changes('{SLOT}', '{end}', NULL, 'format-version', '3') "
        "WHERE data LIKE '{\"action\":\"DDL\"%'").strip())
    decode_seconds = time.monotonic() - started
    psql(f"SELECT pg_drop_replication_slot('{SLOT}')", db="postgres")
    off, on = best[False], best[True]
    wal_off, wal_on = min(wal[False]), min(wal[True])
    n = args.commands
    print(f"\n== DDL capture: {n} commands ({counts['CREATE TABLE']} CREATE TABLE, "
          f"{counts['ALTER TABLE']} ALTER TABLE ADD COLUMN, {counts['DROP TABLE']} DROP TABLE), "
          f"one psql session, best of {args.runs} interleaved")
    cpu_off, cpu_on = best_cpu[False], best_cpu[True]
    print(f"{'capture':10} {'seconds':>8} {'ms/command':>11} {'CPU s':>8} {'WAL bytes':>12} {'WAL/command':>12}")
    print(f"{'off':10} {off:8.3f} {1000 * off / n:11.3f} {cpu_off:8.2f} {wal_off:12d} {wal_off / n:12.0f}")
    print(f"{'on':10} {on:8.3f} {1000 * on / n:11.3f} {cpu_on:8.2f} {wal_on:12d} {wal_on / n:12.0f}")
    print(f"WAL added by capture per command: {(wal_on - wal_off) / n:.0f} bytes")
    print(f"decoding that run's WAL with a slot (format 3): {objects} DDL objects in {decode_seconds:.3f} s "
          f"(the run took {seconds_decoded:.3f} s)")
    print(f"targets: capture on/off = {on / off:.2f} in time, {cpu_on / cpu_off:.2f} in the backend's CPU time "
          "(<= 1.5)")
    if objects != n:
        sys.exit(f"expected {n} DDL objects, got {objects}")
    psql(f"DROP DATABASE {DB}", db="postgres")


if __name__ == "__main__":
    main()
