#!/usr/bin/env bash
# Builds the Debian package of pubjson-relay (docs/relay.md), beside the
# extension's packages (scripts/deb.sh): it runs wherever the database and
# the broker can be reached and needs no PostgreSQL server, so it is a
# package of its own:
#   scripts/deb-relay.sh  ->  target/debian/pubjson-relay_VERSION_amd64.deb
#   /usr/bin/pubjson-relay
#   /usr/share/doc/pubjson-relay/copyright, changelog.gz, relay.md.gz,
#   THIRD-PARTY-LICENSES.gz (the crates it links in, librdkafka and
#   mimalloc among them: scripts/bundled-licenses.py)
# The binary is cargo's `e2e` profile build (opt-level 3 like release,
# without the fat LTO only the extension's library wants): the one the
# end-to-end suites test. Checks the package (files, fields, that the
# binary runs, lintian) and prints its path.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# shellcheck source=scripts/sql-lib.sh
. scripts/sql-lib.sh

version=$(pubjson_version)
arch=$(dpkg --print-architecture)
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(dpkg-parsechangelog -l packaging/debian/changelog -S Timestamp)}
export SOURCE_DATE_EPOCH
name=pubjson-relay
cargo build --quiet -p pubjson-relay --profile e2e
target=${CARGO_TARGET_DIR:-target}
built=$target/e2e/pubjson-relay

out=target/debian
root=$out/${name}_${version}_$arch
rm -rf "$root"
doc=$root/usr/share/doc/$name
install -d -m 0755 "$root/usr/bin" "$doc" "$root/DEBIAN" "$root/usr/share/lintian/overrides"
install -m 0755 "$built" "$root/usr/bin/pubjson-relay"
strip --remove-section=.comment --remove-section=.note "$root/usr/bin/pubjson-relay"
{
  echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
  echo "Upstream-Name: pubjson"
  echo "Comment: The binary links in Rust crates and the C libraries librdkafka"
  echo " and mimalloc, under their own licenses (MIT, Apache-2.0, BSD and"
  echo " others): /usr/share/doc/$name/THIRD-PARTY-LICENSES.gz lists each with"
  echo " its license and notice files."
  echo
  echo "Files: *"
  echo "Copyright: $(sed -n 's/^Copyright (c) //p' LICENSE | head -n 1)"
  echo "License: PostgreSQL"
  sed -n '/^Permission/,$p' LICENSE | sed 's/^$/./; s/^/ /'
} > "$doc/copyright"
gzip -9n < packaging/debian/changelog > "$doc/changelog.gz"
gzip -9n < docs/relay.md > "$doc/relay.md.gz"
scripts/bundled-licenses.py pubjson-relay | gzip -9n > "$doc/THIRD-PARTY-LICENSES.gz"
# Its manual is docs/relay.md and --help.
echo "$name: no-manual-page [usr/bin/pubjson-relay]" > "$root/usr/share/lintian/overrides/$name"
find "$root/usr/share" -type f -exec chmod 0644 {} +
find "$root/usr/share" -type d -exec chmod 0755 {} +

shlibs_dir=$(mktemp -d)
trap 'rm -rf "$shlibs_dir"' EXIT
mkdir "$shlibs_dir/debian"
printf 'Source: pubjson\n\nPackage: %s\nArchitecture: any\n' "$name" > "$shlibs_dir/debian/control"
bin_abs=$(readlink -f "$root/usr/bin/pubjson-relay")
shlibs=$(cd "$shlibs_dir" && dpkg-shlibdeps -O -e"$bin_abs" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$shlibs" ] || { echo "dpkg-shlibdeps found no dependencies of $bin_abs" >&2; exit 1; }
installed_size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: $name
Source: pubjson
Version: $version
Architecture: $arch
Maintainer: $(dpkg-parsechangelog -l packaging/debian/changelog -S Maintainer)
Installed-Size: $installed_size
Depends: $shlibs
Section: database
Priority: optional
Description: relay from a pubjson replication slot into NATS JetStream or Kafka
 pubjson-relay streams a PostgreSQL replication slot of the pubjson output
 plugin (format 3) into NATS JetStream or Kafka, one message per change,
 and confirms to PostgreSQL only what the broker has acknowledged: nothing
 committed is lost, and JetStream stores every change exactly once.
CONTROL
(cd "$root" && find usr -type f -print0 | sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
deb=$out/${name}_${version}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null

fail() { echo "ERROR: $deb: $*" >&2; exit 1; }
[ "$(dpkg-deb -f "$deb" Package)" = "$name" ] || fail "Package field"
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "Version field"
listing=$(dpkg-deb -c "$deb")
grep -q ' ./usr/bin/pubjson-relay$' <<< "$listing" || fail "no /usr/bin/pubjson-relay"
grep -q " ./usr/share/doc/$name/THIRD-PARTY-LICENSES.gz\$" <<< "$listing" || fail "no THIRD-PARTY-LICENSES.gz"
check=$(mktemp -d)
dpkg-deb -x "$deb" "$check"
"$check/usr/bin/pubjson-relay" --version | grep -q "^pubjson-relay $version\$" || fail "the packaged binary does not run"
licenses=$(zcat "$check/usr/share/doc/$name/THIRD-PARTY-LICENSES.gz")
for bundled in '^rdkafka-sys .*: MIT$' '^--- librdkafka/LICENSE$' '^--- c_src/mimalloc/.*LICENSE$'; do
  grep -q "$bundled" <<< "$licenses" || fail "THIRD-PARTY-LICENSES.gz has no line $bundled"
done
rm -rf "$check"
if command -v lintian >/dev/null; then
  report=$(lintian --display-info --tag-display-limit 0 "$deb" 2>&1 |
    grep -v '^running with root privileges is not recommended!$') || true
  if [ -n "$report" ]; then printf 'lintian:\n%s\n' "$report" >&2; fi
  if printf '%s\n' "$report" | grep -q '^[EW]: '; then
    echo "ERROR: lintian found problems in $deb (above)" >&2
    exit 1
  fi
fi
echo "$deb"
