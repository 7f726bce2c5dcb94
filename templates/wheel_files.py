"""What every installed wheel's RECORD says, against what the virtualenv holds (standard library
only). Run at verify time inside a container of an image (the structure checks copy it in):

    python3 -I -S wheel_files.py /opt/venv      # one JSON object on stdout

It observes and decides nothing: `imagekit.core.wheel_files` judges what it prints, with the
reports `prune_venv.py` wrote at build time. For each entry of each `*.dist-info/RECORD` under
`lib/python*/site-packages`: the path (resolved against site-packages, `../../../bin/x`
included, then relative to the venv), RECORD's hash, what is there (`file`, `link`, `missing`
or `other`), the digest of its content (a link's: of what it points to) in RECORD's own
algorithm and spelling (`sha256=<urlsafe base64>`), and for a missing one the digest of the
member of `imagekit-headers.tar.gz` of that path (`packed`), if the archive holds it. Entries
without a hash are looked at, not hashed. Everything is read in blocks, in one process: a CUDA
image's 6 GB cost one pass over the files.
"""

from __future__ import annotations

import base64
import csv
import email.parser
import hashlib
import json
import os
import sys
import tarfile
import time
from pathlib import Path
from typing import BinaryIO

SCHEMA = 1
REPORTS = ("imagekit-pruned.json", "imagekit-pruned-full.json")
LEFT_OUT = "imagekit-left-out.txt"
HEADERS_ARCHIVE = "imagekit-headers.tar.gz"
BLOCK = 1 << 20


class Hasher:
    """Digests of files, each file read once per algorithm (links and shared paths repeat)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], str] = {}
        self.bytes = 0

    def digest(self, path: str, algorithm: str) -> str:
        real = os.path.realpath(path)
        key = (real, algorithm)
        if key not in self.seen:
            with open(real, "rb") as handle:
                self.seen[key] = digests(handle, {algorithm}, self)[algorithm]
        return self.seen[key]


def digests(handle: BinaryIO, algorithms: set[str], hasher: Hasher | None = None) -> dict[str, str]:
    """The digests of what `handle` reads, in blocks, spelled as RECORD spells them."""
    running = {a: hashlib.new(a) for a in algorithms}
    while block := handle.read(BLOCK):
        for digest in running.values():
            digest.update(block)
        if hasher is not None:
            hasher.bytes += len(block)
    return {a: spelled(a, d.digest()) for a, d in running.items()}


def spelled(algorithm: str, raw: bytes) -> str:
    """A digest as RECORD spells it (PEP 376 / the wheel spec)."""
    return f"{algorithm}=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def algorithm_of(record_hash: str) -> str:
    name = record_hash.partition("=")[0]
    return name if name in hashlib.algorithms_available else ""


def observe(where: str, record_hash: str, hasher: Hasher) -> dict[str, str]:
    """What lies at `where` (absolute), hashed the way RECORD hashed it."""
    algorithm = algorithm_of(record_hash)
    if os.path.islink(where):
        found = {"kind": "link", "target": os.readlink(where)}
        if algorithm and os.path.isfile(where):
            found["seen"] = hasher.digest(where, algorithm)
        return found
    if os.path.isfile(where):
        found = {"kind": "file"}
        if algorithm:
            found["seen"] = hasher.digest(where, algorithm)
        return found
    return {"kind": "other" if os.path.lexists(where) else "missing"}


def metadata_of(dist_info: Path) -> tuple[str, str]:
    """(name, version) from METADATA; the folder's name where it cannot be read."""
    try:
        with (dist_info / "METADATA").open(encoding="utf-8", errors="replace") as handle:
            headers = email.parser.Parser().parse(handle, headersonly=True)
        if headers["Name"] and headers["Version"]:
            return str(headers["Name"]), str(headers["Version"])
    except OSError:
        pass
    name, _, version = dist_info.name[: -len(".dist-info")].partition("-")
    return name, version


def relative(where: str, root: Path) -> str:
    """`where` relative to the venv, or absolute where it lies outside it."""
    try:
        return str(Path(where).relative_to(root))
    except ValueError:  # not below root (no Path.is_relative_to: an image may have Python 3.8)
        return where


def distribution(
    dist_info: Path, root: Path, hasher: Hasher
) -> tuple[dict[str, str], list[dict[str, str]]]:
    """A distribution's name, version and RECORD, and what each of its entries found."""
    name, version = metadata_of(dist_info)
    site = dist_info.parent
    entries = []
    with (dist_info / "RECORD").open(newline="", encoding="utf-8") as handle:
        for row in csv.reader(handle):
            if not row or not row[0]:
                continue
            record_hash = row[1] if len(row) > 1 else ""
            where = os.path.normpath(os.path.join(site, row[0]))
            entry = {"path": relative(where, root), "hash": record_hash}
            entries.append({**entry, **observe(where, record_hash, hasher)})
    record = str((dist_info / "RECORD").relative_to(root))
    return {"name": name, "version": version, "record": record}, entries


def packed(root: Path, wanted: dict[str, set[str]]) -> dict[str, dict[str, str]]:
    """The digests (by algorithm) of the archive's members named in `wanted` (path -> the
    algorithms asked for), a symbolic link followed to the member it names."""
    archive = root / HEADERS_ARCHIVE
    if not wanted or not archive.is_file():
        return {}
    algorithms = set().union(*wanted.values())
    files: dict[str, dict[str, str]] = {}
    links: dict[str, str] = {}
    with tarfile.open(archive, "r:gz") as members:
        for member in members:
            name = os.path.normpath(member.name)
            if member.issym():
                links[name] = os.path.normpath(os.path.join(os.path.dirname(name), member.linkname))
            elif member.isfile():
                handle = members.extractfile(member)
                if handle is not None:
                    files[name] = digests(handle, algorithms)
    found = {}
    for name in wanted:
        target, hops = name, 0
        while target in links and hops < 40:
            target, hops = links[target], hops + 1
        if target in files:
            found[name] = files[target]
    return found


def read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def facts(root: Path) -> dict[str, object]:
    started = time.monotonic()
    hasher = Hasher()
    dists, entries = [], []
    for folder in sorted(root.glob("lib/python*/site-packages/*.dist-info")):
        if (folder / "RECORD").is_file():
            dist, found = distribution(folder, root, hasher)
            dists.append({**dist, "entries": found})
            entries += found
    missing = [e for e in entries if e["kind"] == "missing" and algorithm_of(e["hash"])]
    wanted: dict[str, set[str]] = {}
    for entry in missing:
        wanted.setdefault(entry["path"], set()).add(algorithm_of(entry["hash"]))
    in_archive = packed(root, wanted)
    for entry in missing:
        digest = in_archive.get(entry["path"], {}).get(algorithm_of(entry["hash"]))
        if digest:
            entry["packed"] = digest
    left_out = root / LEFT_OUT
    return {
        "schema": SCHEMA,
        "venv": str(root),
        "distributions": dists,
        "reports": {name: read_json(root / name) for name in REPORTS},
        "left_out": left_out.read_text().split() if left_out.is_file() else [],
        "bytes_hashed": hasher.bytes,
        "seconds": round(time.monotonic() - started, 3),
    }


if __name__ == "__main__":
    json.dump(facts(Path(sys.argv[1]).resolve()), sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")
