#!/usr/bin/env bash
# Builds the Debian package of pubjson for PostgreSQL $PG_MAJOR (default 15;
# any of 15-18) from the release build (scripts/package.sh):
#   scripts/deb.sh   ->  target/debian/postgresql-NN-pubjson_VERSION_amd64.deb
# (the path is printed). Laid out as Debian's own extension packages are:
#   /usr/lib/postgresql/NN/lib/pubjson.so
#   /usr/share/postgresql/NN/extension/pubjson.control, pubjson--*.sql,
#       pubjson--*.control (every file of sql/: each version's install
#       script, the upgrade scripts, older versions' control files)
#   /usr/share/doc/postgresql-NN-pubjson/copyright, changelog.gz, README.md.gz, docs/*.md.gz,
#       THIRD-PARTY-LICENSES.gz (the crates the library links in:
#       scripts/bundled-licenses.py),
#       examples/ (monitoring/: the Prometheus exporter's query file, the
#       alerting rules and their tests, docs/monitoring.md)
# It depends on postgresql-NN at the minor version of the server headers it
# was built with or later (PostgreSQL keeps a major's ABI across minor
# releases, but a library built with newer headers may use what an older
# minor lacks) and on the shared libraries the library links
# (dpkg-shlibdeps). VERSION is Cargo.toml's and must head
# packaging/debian/changelog. lintian checks the result when installed
# (scripts/install-deps.sh installs it); its errors and warnings fail the build.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/pg-env.sh
. scripts/pg-env.sh
# shellcheck source=scripts/sql-lib.sh
. scripts/sql-lib.sh

version=$(pubjson_version)
changelog_version=$(dpkg-parsechangelog -l packaging/debian/changelog -S Version)
if [ "$changelog_version" != "$version" ]; then
  echo "ERROR: packaging/debian/changelog starts with version $changelog_version, Cargo.toml says $version." >&2
  echo "Add a changelog entry for $version (dch -c packaging/debian/changelog -v $version, or by hand)." >&2
  exit 1
fi
arch=$(dpkg --print-architecture)
# File dates in the package: the changelog's (dpkg-deb clamps to it).
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(dpkg-parsechangelog -l packaging/debian/changelog -S Timestamp)}
export SOURCE_DATE_EPOCH
name=postgresql-$PG_MAJOR-pubjson
package=$(scripts/package.sh)
pg_config=$(readlink -f "$PG_CONFIG")
built_lib=$package$("$pg_config" --pkglibdir)/pubjson.so
# "PostgreSQL 15.20 (Debian 15.20-0+deb12u1)" -> 15.20
headers_version=$("$pg_config" --version | awk '{print $2}')
built_ext=$package$("$pg_config" --sharedir)/extension
[ -f "$built_lib" ] || { echo "no $built_lib in the release package" >&2; exit 1; }

out=target/debian
root=$out/${name}_${version}_$arch
rm -rf "$root"
lib=$root/usr/lib/postgresql/$PG_MAJOR/lib
ext=$root/usr/share/postgresql/$PG_MAJOR/extension
doc=$root/usr/share/doc/$name
install -d -m 0755 "$lib" "$ext" "$doc" "$root/DEBIAN"
# Stripped as dh_strip does: the dynamic symbols PostgreSQL looks up stay.
install -m 0644 "$built_lib" "$lib/pubjson.so"
strip --remove-section=.comment --remove-section=.note --strip-unneeded "$lib/pubjson.so"
install -m 0644 "$built_ext"/pubjson.control "$built_ext"/pubjson--*.sql "$built_ext"/pubjson--*.control "$ext/"

# copyright in Debian's machine-readable format, the license from LICENSE.
{
  echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
  echo "Upstream-Name: pubjson"
  echo "Comment: The library links in Rust crates under their own licenses"
  echo " (MIT, Apache-2.0 and others): THIRD-PARTY-LICENSES.gz in this"
  echo " directory lists each with its license and notice files."
  echo
  echo "Files: *"
  echo "Copyright: $(sed -n 's/^Copyright (c) //p' LICENSE | head -n 1)"
  echo "License: PostgreSQL"
  sed -n '/^Permission/,$p' LICENSE | sed 's/^$/./; s/^/ /'
} > "$doc/copyright"
gzip -9n < packaging/debian/changelog > "$doc/changelog.gz"
gzip -9n < README.md > "$doc/README.md.gz"
scripts/bundled-licenses.py pubjson | gzip -9n > "$doc/THIRD-PARTY-LICENSES.gz"
# The README links into docs/: the documents go along.
mkdir -p "$doc/docs"
for f in docs/*.md; do gzip -9n < "$f" > "$doc/docs/$(basename "$f").gz"; done
# Files operators copy into their configuration, uncompressed.
mkdir -p "$doc/examples"
cp monitoring/* "$doc/examples/"
find "$doc" -type f -exec chmod 0644 {} +
find "$doc" -type d -exec chmod 0755 {} +

# The libraries pubjson.so links, as versioned dependencies (dpkg-shlibdeps
# wants a debian/control next to it).
shlibs_dir=$(mktemp -d)
trap 'rm -rf "$shlibs_dir"' EXIT
mkdir "$shlibs_dir/debian"
printf 'Source: pubjson\n\nPackage: %s\nArchitecture: any\n' "$name" > "$shlibs_dir/debian/control"
lib_abs=$(readlink -f "$lib/pubjson.so")
shlibs=$(cd "$shlibs_dir" && dpkg-shlibdeps -O -e"$lib_abs" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$shlibs" ] || { echo "dpkg-shlibdeps found no dependencies of $lib_abs" >&2; exit 1; }

installed_size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<EOF
Package: $name
Source: pubjson
Version: $version
Architecture: $arch
Maintainer: $(dpkg-parsechangelog -l packaging/debian/changelog -S Maintainer)
Installed-Size: $installed_size
Depends: postgresql-$PG_MAJOR (>= $headers_version), $shlibs
Section: database
Priority: optional
Description: JSON change data capture output plugin for PostgreSQL $PG_MAJOR
 pubjson is a logical decoding output plugin that writes every committed
 change as JSON, byte for byte as wal2json does (formats 1 and 2), and
 applies publications as pgoutput does (row filters, column lists,
 partition roots). It streams large transactions and decodes two-phase
 commits.
 .
 CREATE EXTENSION pubjson adds SQL functions for decoding statistics and
 replication conflict inspection. List pubjson in output_plugin_libraries
 before creating slots with it.
EOF
(cd "$root" && find usr -type f -print0 | sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"

deb=$out/${name}_${version}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
if command -v lintian >/dev/null; then
  # Errors and warnings fail; informational tags are shown. A native
  # package built outside a Debian source tree has no source to check.
  report=$(lintian --display-info --tag-display-limit 0 "$deb" 2>&1 |
    grep -v '^running with root privileges is not recommended!$') || true
  if [ -n "$report" ]; then printf 'lintian:\n%s\n' "$report" >&2; fi
  if printf '%s\n' "$report" | grep -q '^[EW]: '; then
    echo "ERROR: lintian found problems in $deb (above)" >&2
    exit 1
  fi
else
  echo "lintian is not installed: $deb not checked by it (scripts/install-deps.sh installs it)" >&2
fi
echo "$deb"
