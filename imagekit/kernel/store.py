"""The run store port: the one reader and writer of results/."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from imagekit.kernel.publish_records import PublishRecord
from imagekit.kernel.records import ImageRecord


@dataclass(frozen=True)
class ContextFile:
    """One file of a build context to write: rendered `text`, or the bytes of a `source` file
    outside (a wheel, the CA bundle, uv), linked where the filesystem allows: wheels are big."""

    text: str | None = None
    source: Path | None = None
    mode: int | None = None  # None: what the umask leaves a new file


class RunStore(Protocol):
    """Where one run's records go (`results/<run-id>/`): written atomically, read back typed."""

    @property
    def run_id(self) -> str:
        """The run's id."""
        ...

    @property
    def root(self) -> Path:
        """The run's folder."""
        ...

    def log_file(self, name: str, stage: str = "build") -> Path:
        """The full log of one image's stage."""
        ...

    def write_log(self, name: str, stage: str, text: str) -> None:
        """Write the full log of one image's stage (`log_file`)."""
        ...

    def append_report_to(self, name: str, target: Path) -> None:
        """Append a report file of the run (summary.md) to a file outside it: GitHub's step
        summary."""
        ...

    def update_image(self, name: str, record: ImageRecord) -> None:
        """Merge the sections of `record` into the image's record on disk."""
        ...

    def images(self) -> dict[str, ImageRecord]:
        """Every image record of this run, by name."""
        ...

    def write_report(self, name: str, text: str) -> None:
        """A report file of the run (summary.md, junit.xml)."""
        ...

    def write_publish(self, records: list[PublishRecord]) -> None:
        """publish.json."""
        ...

    def write_artifact(self, name: str, data: object) -> Path:
        """Another JSON file of the run (a package list, an SBOM: what `json.dumps` takes); its
        path."""
        ...

    def write_context(self, name: str, files: Mapping[str, ContextFile]) -> Path:
        """Write image `name`'s build context to the run's `contexts/<name>/`, whole; its path."""
        ...
