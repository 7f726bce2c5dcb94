"""What following upstream needs from the world: package indexes and wheelhouses. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from imagekit.upstream.simple_index import IndexFile


class PackageIndex(Protocol):
    """A package index's simple API (PEP 503/691): a project's files and a wheel's METADATA."""

    def files(self, index: str, project: str) -> tuple[IndexFile, ...]:
        """Every file the index lists for `project` (`InputError` naming the URL)."""
        ...

    def metadata(self, file: IndexFile) -> str:
        """The METADATA of one wheel: PEP 658's file where the index has it, else read from
        the wheel itself (a ranged or whole download)."""
        ...


@dataclass(frozen=True)
class LocalWheel:
    """A wheel on this machine: its file name, sha256 and METADATA text."""

    filename: str
    sha256: str
    metadata: str


class Wheelhouse(Protocol):
    """The torch wheels in folders of this machine."""

    def torch_wheels(self, folder: Path) -> tuple[LocalWheel, ...] | None:
        """The torch wheels in `folder`, by name; None when there is no such folder."""
        ...
