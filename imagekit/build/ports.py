"""What a build needs from the world: a builder and the request it takes. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from imagekit.build.stream import BuildLog
from imagekit.kernel.engine import LocalImage
from imagekit.kernel.store import ContextFile

LineSink = Callable[[BuildLog, str], None]


@dataclass(frozen=True)
class BuildRequest:
    """One image to build from a written context folder."""

    name: str
    context_dir: Path
    reference: str
    build_args: dict[str, str]
    labels: dict[str, str]
    log_path: Path
    no_cache: bool = False
    # The legacy builder: keep the builder stages it leaves untagged (its layer cache).
    keep_stages: bool = False
    ca_bundle: Path | None = None
    # BuildKit only: registry references to import the build cache from and export it to
    # (mode=max, so the builder stage's layers travel too), and the layers' compression.
    cache_from: str | None = None
    cache_to: str | None = None
    compression: str | None = None  # None: new layers gzip, reused ones as they are
    # The network the build's RUN steps get; "none" proves a build needs no network.
    network: str | None = None
    # The Docker platform to build for (linux/arm64 on x86_64 runs its RUN steps under qemu);
    # None: the engine's own.
    platform: str | None = None


@dataclass
class BuildOutcome:
    """How a build ended."""

    ok: bool
    image_id: str | None
    message: str = ""
    log: BuildLog = field(default_factory=BuildLog)


class ContextWriter(Protocol):
    """Where build contexts are written, one folder per image: a run's (`RunStore`) or one of
    the user's (`imagekit bake --contexts`)."""

    def write_context(self, name: str, files: Mapping[str, ContextFile]) -> Path:
        """Write image `name`'s context `files`, replacing any earlier one whole; its folder."""
        ...


class Builder(Protocol):
    """Builds one image."""

    name: str

    def build(self, request: BuildRequest, on_line: LineSink) -> BuildOutcome:
        """Build `request`, calling `on_line` for every output line."""
        ...


class ImageLookup(Protocol):
    """The local engine's images, as far as bake reads them: a base's epoch."""

    def inspect_image(self, reference: str) -> LocalImage | None:
        """The image `reference` names; None when there is none."""
        ...
