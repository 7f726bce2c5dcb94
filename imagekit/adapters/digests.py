"""The sha256 of the big files a build context carries (wheels, uv), kept per machine.

Each image's input hash covers the files its context carries, so `imagekit build` read every
wheel of the wheelhouse once per image, every time, even when each image was up to date: 0.3 s
of CPU for the CPU example's 0.29 GB, 3.2 s (5 s on a busy machine) for the CUDA example's
3.2 GB, per image. A file whose
identity has not changed since it was hashed (the same real path, device, inode, size and
modification time, to the nanosecond) keeps its digest; a write to it moves its modification
time, and a file put in its place has another inode, so either is read again. The change time
is not part of it: each build links the wheels into its context, and a new link changes it (git
can be told the same, core.trustctime). A file modified in the last few seconds is not
remembered: the file system's clock moves in ticks, and a second write within the tick of the
first would leave every field as it was (git's "racily clean" entries). What it does not
notice is a file rewritten in place to the same size and then given back its old modification
time to the nanosecond.

The digests lie in one JSON file in imagekit's cache folder, written whole and renamed into
place, so that a reader never sees half of it; two builds that add digests at once may lose
one of them, which only costs that file's next reading. A cache that cannot be read or written
(a read-only home) is no cache: the digests are computed as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path

from imagekit.build.context import file_sha256

FILE = "digests.json"
# The format of FILE; another one is read as empty.
VERSION = 1
# How long a file must have been left alone for its digest to be remembered.
SETTLED_S = 2.0


def _identity(path: Path) -> tuple[str, int]:
    """What says a file is the one that was hashed (its real path and stat fields), and when
    it was last modified (ns)."""
    found = path.stat()
    fields = (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)
    return f"{os.path.realpath(path)}:" + ":".join(str(f) for f in fields), found.st_mtime_ns


class DigestCache:
    """`digest(path)`: the file's sha256, read again only when the file changed."""

    def __init__(self, folder: Path, settled_s: float | None = None) -> None:
        self.path = folder / FILE
        self.settled_ns = int((SETTLED_S if settled_s is None else settled_s) * 1e9)
        self._known = self._read()

    def _read(self) -> dict[str, str]:
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(self.path.read_text())
            if isinstance(data, dict) and data.get("version") == VERSION:
                entries = data.get("digests")
                if isinstance(entries, dict):
                    return {str(k): str(v) for k, v in entries.items()}
        return {}

    def digest(self, path: Path) -> str:
        """The sha256 of `path`'s bytes (hex), as `file_sha256` gives it."""
        identity, modified = _identity(path)
        known = self._known.get(identity)
        if known is not None:
            return known
        started = time.time_ns()
        digest = file_sha256(path)
        # The identity again: a file written while it was read must not be remembered.
        if _identity(path)[0] == identity and modified < started - self.settled_ns:
            self._known[identity] = digest
            self._write()
        return digest

    def _write(self) -> None:
        # Merged with what another build wrote meanwhile; entries of files that are gone are
        # dropped, so the file does not grow with every wheelhouse ever hashed.
        entries = {**self._read(), **self._known}
        entries = {k: v for k, v in entries.items() if os.path.exists(k.rsplit(":", 4)[0])}
        written = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(
                "w", dir=self.path.parent, prefix=".digests-", delete=False
            ) as out:
                written = out.name
                json.dump({"version": VERSION, "digests": entries}, out, sort_keys=True)
            os.replace(written, self.path)
        except OSError:
            if written is not None:
                with contextlib.suppress(OSError):
                    os.unlink(written)
