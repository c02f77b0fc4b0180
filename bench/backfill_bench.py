#!/usr/bin/env python3
"""Backfill speed: CALL pubjson.backfill() against COPY of the same table.

Builds the decoding benchmark's mixed table (int key, text, numeric,
timestamptz, bool, jsonb) with --rows rows, then, best of --runs runs
(interleaved, each from the same state: VACUUM FREEZE and CHECKPOINT first):

(a) COPY t TO STDOUT through psql into a file, the whole process;
(b) CALL pubjson.backfill('t') with default settings while pg_recvlogical
    streams a new slot in format 3 into a file: from the start of the
    psql process that runs the CALL until the file holds the FE object
    (as a consumer sees it).

Reports (b)/(a) (the target is at most 4), rows per second, the WAL
written per row (pg_current_wal_insert_lsn around the CALL), and how long
a chunk held its row locks: a chunk's locks are taken after the previous
chunk's commit and released at its own, so the time between the commit
timestamps of two consecutive chunks (the B objects of the stream)
bounds it (it also includes one commit's WAL flush and the procedure's
loop). The first chunk's interval starts at _backfill_start's commit,
which the stream does not show: it is left out.

--chunk-rows N passes chunk_rows => N instead of the default (1000): a
bigger chunk costs less per row and holds its locks longer. The CALL's
time per chunk is printed too: with small chunks it is mostly each
chunk's fixed cost (its queries, its commit).

JIT: the server's setting (`jit`, whether a JIT provider is there, the
cost thresholds) is printed beside the figures: PostgreSQL's JIT compiles
a query whose estimated cost passes jit_above_cost, which made every chunk
cost ~70 ms before the extension turned it off for its own queries (issue
42). --jit on|off runs the CALL's session with that setting instead of the
server's (PGOPTIONS).

Usage: bench/backfill_bench.py [--rows 1000000] [--runs 3] [--chunk-rows N] [--jit on|off]
Needs PGHOST/PGPORT/PGUSER/PUBJSON_PG_BIN (scripts/cluster.sh env) and
pubjson installed in the server's tree (scripts/bench.sh backfill does it).
"""
import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time

BIN = os.environ.get("PUBJSON_PG_BIN", "/usr/lib/postgresql/15/bin")
PSQL = os.path.join(BIN, "psql")
RECVLOGICAL = os.path.join(BIN, "pg_recvlogical")
DB = "pubjson_backfill"
SLOT = "backfill_bench"
FE = b'{"action":"FE"'


def psql(sql, db=DB):
    out = subprocess.run([PSQL, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", db],
                         input=sql, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"psql failed: {out.stderr.strip()}\n{sql[:300]}")
    return out.stdout.strip()


def setup(rows):
    psql(f"DROP DATABASE IF EXISTS {DB}", db="postgres")
    psql(f"CREATE DATABASE {DB}", db="postgres")
    psql("CREATE EXTENSION pubjson;\n"
         "CREATE TABLE t (id int PRIMARY KEY, name text, amount numeric(12,2), created timestamptz,"
         " flag bool, doc jsonb);\n"
         "INSERT INTO t SELECT i, 'name ' || i, i * 1.25, '2026-01-01'::timestamptz + i * interval '1 s',"
         f" i % 2 = 0, jsonb_build_object('k', i, 'tag', 'x' || i) FROM generate_series(1, {rows}) i;\n"
         "ANALYZE t;")


def same_state():
    """Every run starts alike: no row locked by an earlier backfill's
    transactions (lock-only xmax), all hint bits set, a fresh checkpoint."""
    psql("VACUUM (FREEZE) t")
    psql("CHECKPOINT")


def time_copy(scratch):
    out = os.path.join(scratch, "copy.out")
    with open(out, "wb") as f:
        started = time.monotonic()
        done = subprocess.run([PSQL, "-X", "-q", "-d", DB, "-c", "COPY t TO STDOUT"], stdout=f,
                              stderr=subprocess.PIPE)
        seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"COPY failed: {done.stderr.decode().strip()}")
    size = os.path.getsize(out)
    os.unlink(out)
    return seconds, size


def wait_streaming(proc):
    """Until pg_recvlogical's walsender streams the slot (bounded)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"pg_recvlogical exited: {proc.stderr.read().decode().strip()}")
        if psql(f"SELECT active FROM pg_replication_slots WHERE slot_name = '{SLOT}'") == "t":
            return
        time.sleep(0.02)
    sys.exit("pg_recvlogical did not start streaming within 30 s")


def wait_fe(path, proc, call, deadline_seconds):
    """Polls the growing output file until it holds the FE object; returns
    when it saw it and when the CALL's psql had exited (time.monotonic(),
    the latter None if it had not)."""
    deadline = time.monotonic() + deadline_seconds
    offset = 0
    tail = b""
    call_exit = None
    with open(path, "rb") as f:
        while time.monotonic() < deadline:
            if call_exit is None and call.poll() is not None:
                call_exit = time.monotonic()
            f.seek(offset)
            data = f.read()
            if data:
                offset += len(data)
                if FE in tail + data:
                    return time.monotonic(), call_exit
                tail = data[-len(FE):]
            elif proc.poll() is not None:
                sys.exit(f"pg_recvlogical exited: {proc.stderr.read().decode().strip()}")
            else:
                time.sleep(0.002)
    sys.exit(f"no FE object within {deadline_seconds} s")


def commit_time(line):
    """The "timestamp" of a B object, in seconds."""
    stamp = line.split(b'"timestamp":"', 1)[1].split(b'"', 1)[0].decode()
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def chunk_commits(path):
    """The commit timestamps of the transactions that carry F objects, and
    the number of F objects."""
    commits = []
    rows = 0
    with open(path, "rb") as f:
        begin = None
        counted = False
        for line in f:
            if line.startswith(b'{"action":"B"'):
                begin, counted = line, False
            elif line.startswith(b'{"action":"F"'):
                rows += 1
                if not counted:
                    commits.append(commit_time(begin))
                    counted = True
    return commits, rows


def jit_report():
    """The server's JIT: setting, provider present, thresholds."""
    row = psql("SELECT current_setting('jit') || ' ' || pg_jit_available()::text || ' '"
               " || current_setting('jit_provider') || ' ' || current_setting('jit_above_cost')")
    setting, available, provider, above = row.split(" ")
    return (f"jit = {setting}, provider {provider} "
            f"{'available' if available == 'true' else 'not installed'}, jit_above_cost = {above}")


def time_backfill(scratch, rows, chunk_rows, jit):
    out = os.path.join(scratch, "backfill.out")
    psql(f"SELECT 'ok' FROM pg_create_logical_replication_slot('{SLOT}', 'pubjson')")
    recv = subprocess.Popen([RECVLOGICAL, "-d", DB, "-S", SLOT, "--start", "-o", "format-version=3",
                             "-F", "0", "-f", out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        open(out, "ab").close()
        wait_streaming(recv)
        wal_before = psql("SELECT pg_current_wal_insert_lsn()")
        started = time.monotonic()
        env = dict(os.environ)
        if jit:
            env["PGOPTIONS"] = f"-c jit={jit}"
        call = subprocess.Popen([PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", DB,
                                 "-c", f"CALL pubjson.backfill('t'{chunk_rows})"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        received, call_exit = wait_fe(out, recv, call, 3600)
        call_error = call.communicate()[1]
        call_exit = call_exit or time.monotonic()
        if call.returncode != 0:
            sys.exit(f"CALL failed: {call_error.decode().strip()}")
        wal = int(psql(f"SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '{wal_before}')"))
    finally:
        recv.terminate()
        recv.wait()
    psql(f"SELECT pg_drop_replication_slot('{SLOT}')")
    commits, sent = chunk_commits(out)
    size = os.path.getsize(out)
    os.unlink(out)
    if sent != rows:
        sys.exit(f"the stream has {sent} F objects, not {rows}")
    gaps = [b - a for a, b in zip(commits, commits[1:])]
    return received - started, wal, gaps, size, call_exit - started


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--chunk-rows", type=int)
    ap.add_argument("--jit", choices=["on", "off"])
    args = ap.parse_args()
    chunk_rows = f", chunk_rows => {args.chunk_rows}" if args.chunk_rows else ""
    setup(args.rows)
    copies, backfills = [], []
    with tempfile.TemporaryDirectory(prefix="pubjson-backfill-") as scratch:
        os.chmod(scratch, 0o777)
        for _ in range(args.runs):
            same_state()
            copies.append(time_copy(scratch))
            same_state()
            backfills.append(time_backfill(scratch, args.rows, chunk_rows, args.jit))
    copy_seconds, copy_bytes = min(copies)
    seconds, wal, gaps, size, call_seconds = min(backfills, key=lambda r: r[0])
    longest = max(max(r[2]) for r in backfills if r[2]) if any(r[2] for r in backfills) else 0.0
    gaps = sorted(gaps)
    print(f"\n== backfill of {args.rows:,} rows (mixed table, {'default settings' if not chunk_rows else chunk_rows[2:]}, best of {args.runs})")
    print(f"server: {psql('SHOW server_version')}; {jit_report()}"
          + (f"; the CALL's session: jit = {args.jit}" if args.jit else ""))
    print(f"{'':44} {'seconds':>8} {'MB out':>8}")
    print(f"{'COPY t TO STDOUT (psql into a file)':44} {copy_seconds:8.3f} {copy_bytes / 1e6:8.1f}")
    print(f"{'backfill to pg_recvlogical, format 3':44} {seconds:8.3f} {size / 1e6:8.1f}")
    print(f"{'  of which the CALL (psql process)':44} {call_seconds:8.3f}")
    print(f"rows/s: {args.rows / seconds:,.0f}; WAL bytes per row: {wal / args.rows:.1f}"
          f" ({wal / 1e6:.1f} MB); chunks: {len(gaps) + 1};"
          f" the CALL's time per chunk: {call_seconds / (len(gaps) + 1) * 1000:.2f} ms")
    if gaps:
        print(f"a chunk's locks (time between chunk commits), best run: median {gaps[len(gaps) // 2] * 1000:.1f} ms,"
              f" 99th percentile {gaps[int(len(gaps) * 0.99)] * 1000:.1f} ms, longest {gaps[-1] * 1000:.1f} ms;"
              f" longest over all runs {longest * 1000:.1f} ms")
    print(f"target: backfill/COPY = {seconds / copy_seconds:.2f} (<= 4)")


if __name__ == "__main__":
    main()
