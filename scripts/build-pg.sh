#!/usr/bin/env bash
# Builds the PostgreSQL majors Debian 12 does not package (17 from trixie's
# postgresql-17 source package, 18 from sid's postgresql-18) into a cache
# outside the work tree, with test_decoding, so the suites can run against
# them:
#   scripts/build-pg.sh 17 18
# prints nothing but progress; afterwards $PUBJSON_PG_CACHE/pgNN/bin/pg_config
# exists. A second run finds the stamp file and does nothing.
#
# Sources: the upstream tarball Debian ships as its .orig.tar.bz2 (no Debian
# patches: they only move paths and sockets), checked against the SHA-256
# below. PostgreSQL 16 is not built: no Debian suite carries postgresql-16.
# No wal2json: Debian's wal2json source tarballs are not on the package
# mirror this machine reaches, and its binaries for 17/18 need glibc 2.38
# (Debian 12 has 2.36); the tests comparing with wal2json skip themselves
# on these servers. The versions are pinned (the mirror drops superseded
# files; update the pins together with the checksums).
set -euo pipefail

CACHE=${PUBJSON_PG_CACHE:-/var/cache/pubjson}
MIRROR=${PUBJSON_DEBIAN_MIRROR:-http://deb.debian.org/debian}

declare -A PG_VERSION=([17]=17.11 [18]=18.6)
# Bumped when the build recipe changes: a new prefix, so servers running
# from the old one keep their files until the switch of the pgNN symlink.
RECIPE=2
# As Debian builds it, minus what the tests do not use (ssl, perl, ...).
CONFIGURE_FLAGS=(--with-libxml --with-icu --enable-debug)
declare -A PG_SHA256=(
  [17]=dd27f2b3c59e73ed14aa3324901242bf69a032a6347805f274e6260322d42979
  [18]=555610c24d53e4316da5b7d3fc25c279d96856d5e0e23ee308c328c5fa881d9f
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi

install_build_packages() {
  local packages=(build-essential bison flex libreadline-dev zlib1g-dev libxml2-dev libicu-dev
                  pkg-config curl ca-certificates bzip2)
  local missing=() p
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "==> installing build packages: ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# Downloads $1 (a path under the mirror's pool) to $2 unless a file with the
# expected SHA-256 ($3) is already there.
fetch() {
  local pool_path=$1 dest=$2 sha=$3
  if [ -f "$dest" ] && echo "$sha  $dest" | sha256sum -c --status; then return; fi
  echo "==> downloading $pool_path"
  curl -fsS -o "$dest.part" "$MIRROR/$pool_path"
  if ! echo "$sha  $dest.part" | sha256sum -c --status; then
    echo "ERROR: checksum mismatch for $pool_path" >&2
    exit 1
  fi
  mv "$dest.part" "$dest"
}

build_major() {
  local major=$1
  local version=${PG_VERSION[$major]:-}
  if [ -z "$version" ]; then
    echo "ERROR: no Debian source package for PostgreSQL $major (known: ${!PG_VERSION[*]})" >&2
    exit 1
  fi
  local prefix=$CACHE/pg$major-$version-r$RECIPE
  local stamp=$prefix/.pubjson-built
  if [ -f "$stamp" ]; then
    ln -sfn "$prefix" "$CACHE/pg$major"
    return
  fi
  install_build_packages
  mkdir -p "$CACHE/src"
  local tarball=$CACHE/src/postgresql-${major}_$version.orig.tar.bz2
  fetch "pool/main/p/postgresql-$major/postgresql-${major}_$version.orig.tar.bz2" "$tarball" "${PG_SHA256[$major]}"

  local build=$CACHE/build/postgresql-$version
  rm -rf "$build" "$prefix"
  mkdir -p "$CACHE/build"
  tar -xjf "$tarball" -C "$CACHE/build"
  echo "==> building PostgreSQL $version into $prefix (several minutes)"
  (
    cd "$build"
    ./configure --prefix="$prefix" "${CONFIGURE_FLAGS[@]}" CFLAGS="-O2" >"$build/configure.out" 2>&1 ||
      { tail -30 "$build/configure.out" >&2; exit 1; }
    make -s -j"$(nproc)" >"$build/make.out" 2>&1 || { tail -40 "$build/make.out" >&2; exit 1; }
    make -s install >>"$build/make.out" 2>&1
    make -s -C contrib/test_decoding install >>"$build/make.out" 2>&1
  )
  rm -rf "$build"
  touch "$stamp"
  ln -sfn "$prefix" "$CACHE/pg$major"
  echo "==> PostgreSQL $version ready: $CACHE/pg$major/bin/pg_config"
}

if [ $# -eq 0 ]; then
  echo "usage: $0 MAJOR... (17 18)" >&2
  exit 2
fi
for major in "$@"; do build_major "$major"; done
