"""The request of `imagekit export`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from imagekit.errors import InputError
from imagekit.hpc.export import ExportFormat, default_out, out_problem
from imagekit.kernel.options import JSON, Arg, Opt


@dataclass(frozen=True)
class ExportCommand:
    """Write an image's root filesystem and environment for HPC runtimes without Docker: a
    folder for `ch-run DIR`, or a squashfs file for `enroot create` and `apptainer build`."""

    image: Annotated[str, Arg(help="An image in the local engine.")]
    format: Annotated[
        ExportFormat,
        Opt("--format", help="A folder, or one squashfs file.", choices=ExportFormat),
    ] = ExportFormat.DIR
    out: Annotated[
        Path | None,
        Opt("--out", help="Where to write it (default: here, REPOSITORY-TAG[.sqfs]); new."),
    ] = None
    json: Annotated[bool, JSON] = False

    def __post_init__(self) -> None:
        if (problem := out_problem(self.destination)) is not None:
            raise InputError(*problem)

    @property
    def destination(self) -> Path:
        """Where the export goes: `--out`, else `default_out` in the current folder."""
        return self.out or default_out(self.image, self.format)
