"""Adapter: the probe files and a run's nonce in a folder of the invoking user's, for the
runtimes that bind a host folder into the image (ch-run, alone or in a Slurm job)."""

from __future__ import annotations

import shutil
from pathlib import Path

NONCE_NAME = ".nonce"


def probe_folder(folder: Path, probes_dir: Path, nonce: str) -> Path:
    """The probe files and the run's nonce in `folder`, this user's alone (0700): the runner,
    as this user inside, reads the nonce and removes it."""
    folder.mkdir(mode=0o700)
    for path in sorted(probes_dir.glob("*.py")):
        shutil.copyfile(path, folder / path.name)
    (folder / NONCE_NAME).write_text(nonce, encoding="utf-8")
    return folder
