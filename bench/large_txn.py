#!/usr/bin/env python3
"""Large transactions through pg_recvlogical: memory and latency.

1. memory: one transaction of --rows rows (default 10 million) decoded by
   pg_recvlogical in format 1 and 2, with streaming off and on. Reports the
   decoding walsender's peak private memory (RssAnon, sampled every 50 ms)
   and its peak resident set (VmHWM, which also counts shared buffers it
   touched), the bytes and lines received, and the time taken.
2. latency: a transaction writes rows for --latency-seconds before it
   commits; reports when its first change reached pg_recvlogical, with
   streaming off (after the commit) and on (while it is still running).

Usage: bench/large_txn.py [--rows N] [--latency-seconds S] [--skip-memory] [--skip-latency]
Needs PGHOST/PGPORT/PGUSER/PUBJSON_PG_BIN (scripts/cluster.sh env).
"""
import argparse
import os
import subprocess
import sys
import threading
import time

BIN = os.environ.get("PUBJSON_PG_BIN", "/usr/lib/postgresql/15/bin")
DB = "pubjson_large"


def psql(sql, db=DB):
    out = subprocess.run([os.path.join(BIN, "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", db],
                         input=sql, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"psql failed: {out.stderr.strip()}\n{sql[:300]}")
    return out.stdout.strip()


def walsender_pid(app):
    for _ in range(200):
        pid = psql(f"SELECT pid FROM pg_stat_replication WHERE application_name = '{app}'", db="postgres")
        if pid:
            return int(pid)
        time.sleep(0.05)
    sys.exit(f"no walsender for {app}")


def proc_kb(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def recvlogical(slot, app, options, endpos=None, env_extra=None):
    cmd = [os.path.join(BIN, "pg_recvlogical"), "-d", DB, "-S", slot, "--start", "--no-loop", "-F", "1", "-f", "-"]
    if endpos:
        cmd += ["-E", endpos]
    for o in options:
        cmd += ["-o", o]
    env = dict(os.environ, PGAPPNAME=app)
    if env_extra:
        env.update(env_extra)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def memory_run(rows):
    psql(f"DROP DATABASE IF EXISTS {DB}", db="postgres")
    psql(f"CREATE DATABASE {DB}", db="postgres")
    psql("CREATE TABLE big (id int8 PRIMARY KEY, v text)")
    modes = [("v2", "2", False), ("v2_stream", "2", True), ("v1", "1", False), ("v1_stream", "1", True)]
    for name, _, _ in modes:
        psql(f"SELECT pg_create_logical_replication_slot('large_{name}', 'pubjson')")
    t0 = time.time()
    psql(f"INSERT INTO big SELECT i, 'row ' || i FROM generate_series(1, {rows}) i")
    end = psql("SELECT pg_current_wal_insert_lsn()")
    print(f"\n== memory: one transaction of {rows:,} rows (insert took {time.time() - t0:.1f} s)")
    print(f"{'mode':12} {'seconds':>8} {'lines':>12} {'MB out':>9} {'peak RssAnon MB':>16} {'peak VmHWM MB':>14}")
    for name, version, streaming in modes:
        options = [f"format-version={version}"] + (["streaming"] if streaming else [])
        app = f"large_{name}"
        start = time.time()
        proc = recvlogical(f"large_{name}", app, options, endpos=end)
        pid = walsender_pid(app)
        peak_anon = 0
        stop = threading.Event()

        def sample():
            nonlocal peak_anon
            while not stop.is_set():
                v = proc_kb(pid, "RssAnon")
                if v:
                    peak_anon = max(peak_anon, v)
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        lines = 0
        nbytes = 0
        hwm = 0
        for chunk in iter(lambda: proc.stdout.read(1 << 20), b""):
            lines += chunk.count(b"\n")
            nbytes += len(chunk)
            hwm = max(hwm, proc_kb(pid, "VmHWM") or 0)
        proc.wait()
        stop.set()
        sampler.join()
        if proc.returncode != 0:
            sys.exit(f"pg_recvlogical failed: {proc.stderr.read().decode()}")
        print(f"{name:12} {time.time() - start:8.1f} {lines:12,} {nbytes / 1e6:9.0f} {peak_anon / 1024:16.1f} {hwm / 1024:14.1f}")
    for name, _, _ in modes:
        psql(f"SELECT pg_drop_replication_slot('large_{name}')")


def latency_run(seconds):
    psql(f"DROP DATABASE IF EXISTS {DB}", db="postgres")
    psql(f"CREATE DATABASE {DB}", db="postgres")
    psql("CREATE TABLE trickle (id int8 PRIMARY KEY, v text)")
    print(f"\n== latency: a transaction writes for {seconds} s, then commits "
          "(pg_recvlogical with logical_decoding_work_mem = 1MB)")
    for streaming in (False, True):
        slot = f"latency_{'on' if streaming else 'off'}"
        psql("TRUNCATE trickle")
        psql(f"SELECT pg_create_logical_replication_slot('{slot}', 'pubjson')")
        options = ["format-version=2"] + (["streaming"] if streaming else [])
        proc = recvlogical(slot, slot, options, env_extra={"PGOPTIONS": "-c logical_decoding_work_mem=1MB"})
        walsender_pid(slot)
        first_change = []

        def reader():
            for line in proc.stdout:
                if b'"action":"I"' in line:
                    first_change.append(time.time())
                    break
            proc.stdout.read()

        t = threading.Thread(target=reader)
        t.start()
        writer = subprocess.Popen([os.path.join(BIN, "psql"), "-X", "-q", "-d", DB], stdin=subprocess.PIPE, text=True)
        start = time.time()
        batches = []
        i = 0
        writer.stdin.write("BEGIN;\n")
        while time.time() - start < seconds:
            writer.stdin.write(f"INSERT INTO trickle SELECT g, repeat('x', 100) FROM generate_series({i * 5000 + 1}, {(i + 1) * 5000}) g;\n")
            writer.stdin.flush()
            batches.append(time.time())
            i += 1
            time.sleep(0.1)
        writer.stdin.write("COMMIT;\n")
        writer.stdin.close()
        writer.wait()
        committed = time.time()
        deadline = time.time() + 120
        while not first_change and time.time() < deadline:
            time.sleep(0.01)
        proc.send_signal(2)
        proc.wait()
        t.join()
        psql(f"SELECT pg_drop_replication_slot('{slot}')")
        if not first_change:
            sys.exit("no change received")
        delay = first_change[0] - start
        print(f"streaming {'on ' if streaming else 'off'}: first change received {delay:6.2f} s after the "
              f"transaction began (it committed after {committed - start:.2f} s, {i} batches)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--latency-seconds", type=float, default=10)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-latency", action="store_true")
    args = ap.parse_args()
    if not args.skip_memory:
        memory_run(args.rows)
    if not args.skip_latency:
        latency_run(args.latency_seconds)


if __name__ == "__main__":
    main()
