"""How `imagekit build` builds, apart from what: the request's knobs, read-only (`BuildAsk`), and
the frozen settings a `BuildRun` works with (`BuildSettings`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from imagekit.build.context import ContextInputs
from imagekit.build.options import BuilderChoice, BuildkitAsk, BuildNetwork, Compression
from imagekit.build.render import RenderOptions
from imagekit.matrix.plan import ImagePlan


class BuildAsk(Protocol):
    """How `imagekit build` was asked to build (its request, read-only): the builder and
    every knob of `BuildSettings`."""

    @property
    def builder(self) -> BuilderChoice: ...
    @property
    def buildkit(self) -> BuildkitAsk: ...
    @property
    def jobs(self) -> int: ...
    @property
    def no_cache(self) -> bool: ...
    @property
    def fail_fast(self) -> bool: ...
    @property
    def pull(self) -> bool: ...
    @property
    def labels(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def cache_from(self) -> str | None: ...
    @property
    def cache_to(self) -> str | None: ...
    @property
    def compression(self) -> Compression | None: ...
    @property
    def network(self) -> BuildNetwork: ...
    @property
    def source_date_epoch(self) -> int | None: ...


@dataclass(frozen=True)
class BuildSettings:
    """Everything about how to build, apart from what."""

    options: RenderOptions
    inputs: ContextInputs
    contexts_dir: Path
    jobs: int = 1
    no_cache: bool = False
    fail_fast: bool = False
    # Pull a missing base image (where a registry is reachable, e.g. CI); off by default so
    # that an air-gapped build fails at once with a hint instead of waiting on DNS.
    pull: bool = False
    extra_labels: tuple[tuple[str, str], ...] = ()
    # BuildKit's registry cache: repositories that hold one cache per image, tagged as it is.
    cache_from: str | None = None
    cache_to: str | None = None
    compression: Compression | None = None  # every layer forced to gzip or zstd (BuildKit)
    network: BuildNetwork = BuildNetwork.DEFAULT  # none: the build must be offline
    # The caller's SOURCE_DATE_EPOCH (None: each image's parent's creation time;
    # build/reproducible.py).
    source_date_epoch: int | None = None

    def __post_init__(self) -> None:
        # A value given as its text ("zstd", "none") is taken as its member: one type inside.
        if self.compression is not None:
            object.__setattr__(self, "compression", Compression(self.compression))
        object.__setattr__(self, "network", BuildNetwork(self.network))

    @classmethod
    def of(
        cls,
        ask: BuildAsk,
        options: RenderOptions,
        inputs: ContextInputs,
        contexts_dir: Path,
    ) -> BuildSettings:
        """The settings of what was asked, with the render inputs resolved for the builder."""
        return cls(
            options=options,
            inputs=inputs,
            contexts_dir=contexts_dir,
            jobs=ask.jobs,
            no_cache=ask.no_cache,
            fail_fast=ask.fail_fast,
            pull=ask.pull,
            extra_labels=ask.labels,
            cache_from=ask.cache_from,
            cache_to=ask.cache_to,
            compression=ask.compression,
            network=ask.network,
            source_date_epoch=ask.source_date_epoch,
        )

    def cache_ref(self, repository: str | None, plan: ImagePlan) -> str | None:
        """The cache reference of one image in `repository` (None: no cache)."""
        return f"{repository}:{plan.local_tag}" if repository else None
