#!/usr/bin/env bash
# Tests the Debian package of pubjson (scripts/deb.sh) for PostgreSQL
# $PG_MAJOR (default 15):
#   - its contents: the library, control file and every extension script
#     in Debian's directories, copyright, changelog, README, Depends on
#     postgresql-NN at the server headers' minor version or later (and
#     lintian clean, checked by deb.sh);
#   - where PostgreSQL NN is Debian's package (15 on Debian 12): installs it
#     with dpkg -i, starts a throwaway cluster of that server (port 54343,
#     under $PUBJSON_TMP), runs CREATE EXTENSION pubjson, decodes a change
#     through a slot, upgrades a database from the oldest version of sql/,
#     removes the package with dpkg -r and checks that no pubjson file is
#     left. pubjson files already in that server's directories that no
#     package owns (scripts/install.sh's) are set aside first and put back
#     afterwards, also when the test fails.
# Other majors (not Debian packages here) get the contents checks only.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/pg-env.sh
. scripts/pg-env.sh
# shellcheck source=scripts/sql-lib.sh
. scripts/sql-lib.sh
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi

fail() { echo "deb test (PostgreSQL $PG_MAJOR): FAILED: $*" >&2; exit 1; }

version=$(pubjson_version)
name=postgresql-$PG_MAJOR-pubjson
deb=$(scripts/deb.sh)
[ -f "$deb" ] || fail "scripts/deb.sh built no package"
case "$(basename "$deb")" in
  "${name}_${version}_amd64.deb") ;;
  *) fail "unexpected package name $(basename "$deb")" ;;
esac

echo "==> $deb: contents"
[ "$(dpkg-deb -f "$deb" Package)" = "$name" ] || fail "Package field"
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "Version field"
depends=$(dpkg-deb -f "$deb" Depends)
# The server at the headers' minor version or later.
headers_version=$("$(readlink -f "$PG_CONFIG")" --version | awk '{print $2}')
case ", $depends," in
  *", postgresql-$PG_MAJOR (>= $headers_version),"*) ;;
  *) fail "Depends lacks postgresql-$PG_MAJOR (>= $headers_version): $depends" ;;
esac
case "$depends" in *libc6*) ;; *) fail "Depends lacks libc6: $depends" ;; esac
listed=$(dpkg-deb --fsys-tarfile "$deb" | tar -t | sed 's|^\./|/|' | grep -v '/$' | sort)
expected=$(
  {
    echo "/usr/lib/postgresql/$PG_MAJOR/lib/pubjson.so"
    echo "/usr/share/postgresql/$PG_MAJOR/extension/pubjson.control"
    for f in sql/pubjson--*.sql sql/pubjson--*.control; do echo "/usr/share/postgresql/$PG_MAJOR/extension/$(basename "$f")"; done
    for f in README.md.gz changelog.gz copyright THIRD-PARTY-LICENSES.gz; do echo "/usr/share/doc/$name/$f"; done
    for f in docs/*.md; do echo "/usr/share/doc/$name/docs/$(basename "$f").gz"; done
    for f in monitoring/*; do echo "/usr/share/doc/$name/examples/$(basename "$f")"; done
  } | sort
)
if [ "$listed" != "$expected" ]; then
  diff <(echo "$expected") <(echo "$listed") >&2 || true
  fail "files in the package (- expected, + packaged)"
fi
# The packaged scripts are the committed ones.
contents=$(mktemp -d)
trap 'rm -rf "$contents"' EXIT
dpkg-deb -x "$deb" "$contents"
for f in sql/pubjson--*.sql sql/pubjson--*.control; do
  cmp -s "$f" "$contents/usr/share/postgresql/$PG_MAJOR/extension/$(basename "$f")" \
    || fail "packaged $(basename "$f") differs from $f"
done
grep -q "^default_version = '$version'" "$contents/usr/share/postgresql/$PG_MAJOR/extension/pubjson.control" \
  || fail "the packaged control file does not name default_version $version"
grep -q '^License: PostgreSQL' "$contents/usr/share/doc/$name/copyright" || fail "copyright"
licenses=$(zcat "$contents/usr/share/doc/$name/THIRD-PARTY-LICENSES.gz")
grep -q '^pgrx .*: MIT$' <<< "$licenses" || fail "THIRD-PARTY-LICENSES.gz does not list pgrx"
for f in monitoring/*; do
  cmp -s "$f" "$contents/usr/share/doc/$name/examples/$(basename "$f")" || fail "packaged $f differs"
done

# Installing needs the server's Debian package, whose directories these are.
if ! dpkg-query -W -f='${Status}' "postgresql-$PG_MAJOR" 2>/dev/null | grep -q "install ok installed"; then
  echo "==> PostgreSQL $PG_MAJOR is not installed from a Debian package here: contents checked, not installed"
  if [ -n "${PUBJSON_SKIP_LOG:-}" ]; then
    echo "PostgreSQL $PG_MAJOR: deb-test.sh: dpkg -i needs Debian's postgresql-$PG_MAJOR (contents checked)" >> "$PUBJSON_SKIP_LOG"
  fi
  echo "deb test (PostgreSQL $PG_MAJOR): contents ok"
  exit 0
fi

debian_bin=/usr/lib/postgresql/$PG_MAJOR/bin
pubjson_files() {
  find "/usr/lib/postgresql/$PG_MAJOR/lib" "/usr/share/postgresql/$PG_MAJOR/extension" /usr/share/doc \
    -maxdepth 1 -name '*pubjson*' 2>/dev/null | sort
}

# Leftover of an interrupted run.
if dpkg-query -W -f='${Status}' "$name" 2>/dev/null | grep -q "ok installed"; then
  echo "==> removing $name left installed by an earlier run"
  $SUDO dpkg -r "$name" >/dev/null
fi
# Set aside pubjson files no package owns (scripts/install.sh's), restored on exit.
aside=$(mktemp -d)
cluster_root=${PUBJSON_TMP:-/tmp}/pubjson-deb
cluster() {
  PG_BIN=$debian_bin PUBJSON_PGDATA=$cluster_root/data PUBJSON_SOCKET=$cluster_root/socket \
    PUBJSON_PORT=54343 scripts/cluster.sh "$@"
}
restore() {
  cluster destroy >/dev/null 2>&1 || true
  if dpkg-query -W -f='${Status}' "$name" 2>/dev/null | grep -q "ok installed"; then
    $SUDO dpkg -r "$name" >/dev/null || true
  fi
  if [ -s "$aside/list" ]; then
    while read -r f; do
      $SUDO install -m "$(stat -c %a "$aside/files$f")" "$aside/files$f" "$f.pubjson-new"
      $SUDO mv -f "$f.pubjson-new" "$f"
    done < "$aside/list"
    echo "==> put back the pubjson files installed before the test ($(wc -l < "$aside/list"))"
  fi
  rm -rf "$aside" "$contents"
}
trap restore EXIT
pubjson_files | while read -r f; do
  [ -f "$f" ] || continue
  dpkg -S "$f" >/dev/null 2>&1 && continue
  mkdir -p "$aside/files$(dirname "$f")"
  cp -p "$f" "$aside/files$f"
  echo "$f" >> "$aside/list"
  $SUDO rm -f "$f"
done
[ -z "$(pubjson_files)" ] || fail "pubjson files owned by another package: $(pubjson_files | tr '\n' ' ')"

echo "==> dpkg -i $(basename "$deb")"
$SUDO dpkg -i "$deb" >/dev/null
dpkg-query -W -f='${Status} ${Version}\n' "$name" | grep -qx "install ok installed $version" \
  || fail "dpkg does not report $name $version installed"
[ "$(dpkg -L "$name" | grep -c pubjson)" -ge 4 ] || fail "dpkg -L $name lists too little"

echo "==> PostgreSQL $PG_MAJOR: CREATE EXTENSION and decoding through the packaged library"
cluster destroy
cluster start
psql_() { cluster psql -v ON_ERROR_STOP=1 -qAt "$@"; }
psql_ -d postgres -c "CREATE DATABASE pubjson_deb"
psql_ -d pubjson_deb -c "CREATE EXTENSION pubjson"
[ "$(psql_ -d pubjson_deb -c "SELECT extversion FROM pg_extension WHERE extname = 'pubjson'")" = "$version" ] \
  || fail "CREATE EXTENSION did not install version $version"
psql_ -d pubjson_deb -c "CREATE TABLE orders (id int PRIMARY KEY, customer text)" \
  -c "SELECT pg_create_logical_replication_slot('deb_test', 'pubjson')" >/dev/null
psql_ -d pubjson_deb -c "INSERT INTO orders VALUES (1, 'Ada')"
# PostgreSQL parses the JSON: the insert, with its table and values.
decoded=$(psql_ -d pubjson_deb -c "
  SELECT string_agg(format('%s %s %s %s', d->>'action', d->>'table',
                           d->'columns'->0->>'value', d->'columns'->1->>'value'), ' | ' ORDER BY n)
    FROM (SELECT data::jsonb AS d, row_number() OVER () AS n
            FROM pg_logical_slot_get_changes('deb_test', NULL, NULL, 'format-version', '2')) c")
[ "$decoded" = "B    | I orders 1 Ada | C   " ] || fail "decoded through the slot: '$decoded'"
[ "$(psql_ -d pubjson_deb -c "SELECT changes_emitted FROM pubjson.decoding_stats() WHERE slot_name = 'deb_test'")" = 1 ] \
  || fail "pubjson.decoding_stats() did not count the change"
psql_ -d pubjson_deb -c "SELECT pg_drop_replication_slot('deb_test')" >/dev/null
# The packaged upgrade scripts: the oldest version of sql/ up to this one.
oldest=$(for f in sql/pubjson--*.sql; do basename "$f" .sql; done | sed -n 's/^pubjson--\([^-]*\)$/\1/p' | sort -V | head -n 1)
psql_ -d postgres -c "CREATE DATABASE pubjson_deb_upgrade"
psql_ -d pubjson_deb_upgrade -c "CREATE EXTENSION pubjson VERSION '$oldest'" -c "ALTER EXTENSION pubjson UPDATE"
[ "$(psql_ -d pubjson_deb_upgrade -c "SELECT extversion FROM pg_extension WHERE extname = 'pubjson'")" = "$version" ] \
  || fail "ALTER EXTENSION pubjson UPDATE from $oldest did not reach $version"
cluster destroy

echo "==> dpkg -r $name"
$SUDO dpkg -r "$name" >/dev/null
if dpkg-query -W -f='${Status}' "$name" 2>/dev/null | grep -q "installed"; then
  fail "dpkg still reports $name: $(dpkg-query -W -f='${Status}' "$name")"
fi
left=$(pubjson_files)
[ -z "$left" ] || fail "files left after dpkg -r: $left"
echo "deb test (PostgreSQL $PG_MAJOR): installed, decoded, upgraded, removed cleanly"
