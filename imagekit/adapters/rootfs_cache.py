"""Adapter: the root filesystems mmdebstrap made, kept per machine and used again while the
mirror serves the same packages.

What a bootstrap installs is decided by its mmdebstrap command and by the suite's index on the
mirror: `dists/SUITE/InRelease` names (by hash) every Packages file apt resolves from. So a tar
made from one InRelease is, package for package, what a second run from the same InRelease
would make, and a second `imagekit base bootstrap` (the same base into another engine, or again
after `docker system prune`) loads the kept tar in seconds instead of installing every package
again for about a minute. A new InRelease (a point release, a security fix in the suite) is a
new key and a fresh mmdebstrap run; a mirror whose index cannot be read is never cached.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# Each kept tar is 250-450 MB; the newest few cover the bases one machine makes (the demo's,
# `--packages-for full`, another architecture).
KEEP = 4
RELEASE_TIMEOUT_S = 30


def release_url(mirror: str, suite: str) -> str | None:
    """Where `mirror`'s index of `suite` is; None for a mirror given in another form (a
    sources line, a file: folder) whose index imagekit does not read."""
    if not mirror.startswith(("http://", "https://")):
        return None
    return f"{mirror.rstrip('/')}/dists/{suite}/InRelease"


def fetch(url: str) -> bytes | None:
    """The bytes at `url`; None where the mirror does not answer (then nothing is cached)."""
    try:
        with urllib.request.urlopen(url, timeout=RELEASE_TIMEOUT_S) as answer:
            return bytes(answer.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None


def rootfs_key(command: list[str], epoch: int | None, release: bytes) -> str:
    """The key of a root filesystem: the mmdebstrap command (written for a fixed output path),
    the epoch it ran with (file times) and the hash of the suites' indexes it resolved from."""
    decided = {
        "command": command,
        "epoch": epoch,
        "release": hashlib.sha256(release).hexdigest(),
    }
    return hashlib.sha256(json.dumps(decided, sort_keys=True).encode()).hexdigest()


@dataclass
class RootfsCache:
    """Root filesystem tars under `folder`, by `rootfs_key`; at most `keep` of them, the least
    recently used removed first. `release` reads a mirror's index (a stand-in in tests)."""

    folder: Path
    release: Callable[[str], bytes | None] = fetch
    keep: int = KEEP
    # The tar the last `find` returned (None: it missed), for the command to say so.
    reused: Path | None = field(default=None, init=False)
    # The InRelease the last `key` read, each as (URL, sha256): what the base was made from.
    indexes: tuple[tuple[str, str], ...] = field(default=(), init=False)

    def key(
        self, command: list[str], epoch: int | None, sources: list[tuple[str, str]]
    ) -> str | None:
        """The key of this bootstrap from `sources` ((mirror, suite): the suite, its security
        suite); None where an index cannot be read."""
        indexes, read = [], []
        for mirror, suite in sources:
            url = release_url(mirror, suite)
            index = self.release(url) if url else None
            if not url or not index:
                return None
            indexes.append(index)
            read.append((url, hashlib.sha256(index).hexdigest()))
        self.indexes = tuple(read)
        # One suite alone keys as it always did, so the tars kept before stay usable.
        return rootfs_key(command, epoch, b"".join(indexes))

    def find(self, key: str | None) -> Path | None:
        """The kept tar for `key`, marked as just used; None when there is none."""
        path = self.folder / f"{key}.tar" if key else None
        self.reused = path if path is not None and path.is_file() else None
        if self.reused is not None:
            os.utime(self.reused)
        return self.reused

    def made(self, key: str | None, now: str) -> str:
        """When the kept tar for `key` was made (ISO 8601, UTC): the time kept beside it, else
        `now`, kept from then on. A base loaded again from one tar is then the same image."""
        if key is None:
            return now
        stamp = self.folder / f"{key}.made"
        with contextlib.suppress(OSError):
            if stamp.is_file():
                return stamp.read_text(encoding="utf-8").strip() or now
            self.folder.mkdir(parents=True, exist_ok=True)
            stamp.write_text(now + "\n", encoding="utf-8")
        return now

    def keep_tar(self, key: str | None, tar: Path) -> None:
        """Keep a copy of `tar` under `key` (a link where it can be), then drop the least
        recently used beyond `keep`. A cache that cannot be written is no cache, not an error:
        the bootstrap itself succeeded."""
        if key is None:
            return
        with contextlib.suppress(OSError):
            self.folder.mkdir(parents=True, exist_ok=True)
            partial = self.folder / f"{key}.tar.{os.getpid()}.part"
            try:
                os.link(tar, partial)
            except OSError:  # another file system
                shutil.copyfile(tar, partial)
            partial.replace(self.folder / f"{key}.tar")  # whole or not at all
            kept = sorted(self.folder.glob("*.tar"), key=lambda p: p.stat().st_mtime)
            for old in kept[: max(0, len(kept) - self.keep)]:
                old.unlink(missing_ok=True)
                old.with_suffix(".made").unlink(missing_ok=True)
