#!/usr/bin/env python3
"""The licenses of the crates a binary of the workspace links in.

    scripts/bundled-licenses.py PACKAGE > THIRD-PARTY-LICENSES

Walks PACKAGE's normal dependencies (not dev or build ones) for the
host's platform, as `cargo metadata` resolves them from Cargo.lock, and
prints, for each crate, its name, version and declared license, then the
license and notice files it ships (LICENSE*, COPYING*, NOTICE*, also in
its bundled C sources: librdkafka in rdkafka-sys, mimalloc in
libmimalloc-sys). A Debian package of a statically linked binary carries
this beside its copyright file.
"""

import json
import os
import subprocess
import sys

NAMES = ("license", "licence", "copying", "notice")
SKIP_DIRS = {"tests", "test", "examples", "benches", "docs", "doc", ".git", "target"}


def host_triple():
    out = subprocess.run(["rustc", "-vV"], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("host: "):
            return line.split(" ", 1)[1]
    sys.exit("rustc -vV printed no host")


def license_files(root):
    """License and notice files under `root`, at most three levels deep."""
    found = []
    base = root.count(os.sep)
    for dirpath, dirnames, filenames in os.walk(root):
        depth = dirpath.count(os.sep) - base
        dirnames[:] = sorted(d for d in dirnames if d.lower() not in SKIP_DIRS and depth < 3)
        for name in sorted(filenames):
            if name.lower().startswith(NAMES):
                found.append(os.path.join(dirpath, name))
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    wanted = sys.argv[1]
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--locked",
             "--filter-platform", host_triple()],
            check=True, capture_output=True, text=True,
        ).stdout
    )
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    roots = [p["id"] for p in meta["packages"] if p["name"] == wanted and p["source"] is None]
    if not roots:
        sys.exit(f"no workspace package {wanted}")
    seen, stack = set(), list(roots)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        for dep in nodes[pid]["deps"]:
            if any(k["kind"] is None for k in dep["dep_kinds"]):
                stack.append(dep["pkg"])
    crates = sorted(
        (packages[pid] for pid in seen if packages[pid]["source"] is not None),
        key=lambda p: (p["name"], p["version"]),
    )
    print(f"The crates linked into {wanted}, with their licenses and notices.")
    print(f"{len(crates)} crates.\n")
    # A text many crates share (Apache-2.0, MIT with one holder) is
    # printed once, where it first appears, and named after that.
    printed = {}
    for p in crates:
        declared = p.get("license") or "see the files below"
        name = f"{p['name']} {p['version']}"
        print("=" * 72)
        print(f"{name}: {declared}")
        print("=" * 72)
        root = os.path.dirname(p["manifest_path"])
        files = license_files(root)
        if not files:
            print(f"(no license file in the crate; its manifest declares {declared})\n")
        for path in files:
            shown = os.path.relpath(path, root)
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read().rstrip()
            if text in printed:
                print(f"--- {shown}: the same text as {printed[text]}\n")
                continue
            printed[text] = f"{name} {shown}"
            print(f"--- {shown}")
            print(text)
            print()


if __name__ == "__main__":
    main()
