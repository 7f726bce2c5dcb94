"""Layers made in memory, as an engine's `docker save` holds them, for the export tests."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass

MTIME = 1_700_000_000  # every planted member's time, unless a test gives its own


@dataclass(frozen=True)
class Entry:
    """One member of a planted layer."""

    info: tarfile.TarInfo
    data: bytes = b""


def _info(name: str, kind: bytes, mode: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = kind, mode, mtime
    return info


def file(name: str, data: bytes = b"x", mode: int = 0o644, mtime: int = MTIME) -> Entry:
    info = _info(name, tarfile.REGTYPE, mode, mtime)
    info.size = len(data)
    return Entry(info, data)


def folder(name: str, mode: int = 0o755, mtime: int = MTIME) -> Entry:
    return Entry(_info(name, tarfile.DIRTYPE, mode, mtime))


def symlink(name: str, target: str, mtime: int = MTIME) -> Entry:
    info = _info(name, tarfile.SYMTYPE, 0o777, mtime)
    info.linkname = target
    return Entry(info)


def hardlink(name: str, target: str) -> Entry:
    info = _info(name, tarfile.LNKTYPE, 0o644, MTIME)
    info.linkname = target
    return Entry(info)


def special(name: str, kind: bytes) -> Entry:
    """A device node (CHRTYPE, BLKTYPE) or a FIFO (FIFOTYPE)."""
    return Entry(_info(name, kind, 0o666, MTIME))


def layer(*entries: Entry, compression: str = "") -> bytes:
    """A layer tar of `entries`, in their order (`compression`: "" or "gz")."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{compression}") as archive:
        for entry in entries:
            archive.addfile(entry.info, io.BytesIO(entry.data) if entry.data else None)
    return buffer.getvalue()


def saved_image(*layers: bytes) -> bytes:
    """A `docker save` tar of `layers` (manifest.json names them in order; the blobs lie in
    the tar in the other order, as an engine may write them)."""
    names = [f"blobs/sha256/{index:064x}" for index in range(len(layers))]
    manifest = [{"Config": "blobs/sha256/config", "RepoTags": None, "Layers": names}]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in reversed([*zip(names, layers, strict=True)]):
            archive.addfile(file(name, data).info, io.BytesIO(data))
        text = json.dumps(manifest).encode()
        archive.addfile(file("manifest.json", text).info, io.BytesIO(text))
    return buffer.getvalue()
