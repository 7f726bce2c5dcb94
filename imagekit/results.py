"""The results folder of a run: `results/<run-id>/`, written atomically, file by file.

Each image's record is written as soon as that image is done, through a temp
file and a rename, so an interrupted run keeps every image already finished and
never leaves a half-written file.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagekit import __version__


def new_run_id(now_s: float | None = None) -> str:
    """`20261130T010203Z-1a2b3c4d`: sortable by time, unique across parallel CI jobs.

    32 random bits: with 16, a few dozen jobs starting in the same second
    already collide with a chance of a few percent.
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now_s))
    return f"{stamp}-{secrets.token_hex(4)}"


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step (temp file in the same folder + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Not mkstemp: it makes the file 0600, and the rename would then leave results
    # unreadable to anyone but their writer. 0o666 less the umask is what a plain
    # open(path, "w") gives; O_EXCL keeps the temp name private to this call.
    tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    """Write `data` as indented, key-sorted JSON, atomically."""
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


@dataclass(frozen=True)
class RunFolder:
    """One run's folder and the names of the files in it."""

    root: Path
    run_id: str

    @classmethod
    def create(cls, results_dir: Path, run_id: str | None = None) -> RunFolder:
        """Make `results_dir/<run-id>/` (a new id unless one is given).

        A new id never reuses an existing folder: two runs that drew the same id
        would otherwise write into one folder and mix their records.
        """
        rid = run_id or new_run_id()
        root = results_dir / rid
        while run_id is None:
            try:
                root.mkdir(parents=True)
                break
            except FileExistsError:
                rid = new_run_id()
                root = results_dir / rid
        (root / "images").mkdir(parents=True, exist_ok=True)
        (root / "logs").mkdir(parents=True, exist_ok=True)
        return cls(root, rid)

    def image_file(self, name: str) -> Path:
        """The JSON record of one image."""
        return self.root / "images" / f"{name}.json"

    def log_file(self, name: str, stage: str = "build") -> Path:
        """The full log of one image's build (or other stage)."""
        return self.root / "logs" / f"{name}.{stage}.log"

    def write_run(self, command: str, engine: dict[str, Any], extra: dict[str, Any]) -> None:
        """run.json: who ran what where."""
        write_json(
            self.root / "run.json",
            {
                "schema_version": 1,
                "run_id": self.run_id,
                "command": command,
                "imagekit_version": __version__,
                "host": {
                    "hostname": socket.gethostname(),
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                },
                "engine": engine,
                **extra,
            },
        )

    def update_image(self, name: str, section: str, data: Any) -> None:
        """Set `section` of an image's record, keeping its other sections."""
        path = self.image_file(name)
        record: dict[str, Any] = {}
        if path.is_file():
            record = json.loads(path.read_text(encoding="utf-8"))
        record[section] = data
        write_json(path, record)
