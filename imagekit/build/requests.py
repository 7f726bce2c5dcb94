"""The requests of the commands that make images: build, bake, base bootstrap, gc."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Annotated

from imagekit.build.distro_packages import BASE_PACKAGES, packages_for
from imagekit.build.inputs import RenderInputs
from imagekit.build.options import (
    BuilderChoice,
    BuildkitAsk,
    BuildNetwork,
    Compression,
    older_than_s,
)
from imagekit.errors import InputError
from imagekit.kernel.options import JSON, RESULTS, Opt, comma_separated
from imagekit.kernel.vocabulary import Flavour
from imagekit.matrix.selection import Selection, pairs


@dataclass(frozen=True)
class BuildSettings:
    """How `imagekit build` builds, apart from what: each option on its field, taken by
    `build_images` as it is."""

    builder: Annotated[
        BuilderChoice,
        Opt("--builder", help="sdk: Docker SDK; buildx: BuildKit; auto: BuildKit where it works."),
    ] = BuilderChoice.AUTO
    jobs: Annotated[int, Opt("--jobs", min=1, max=32, help="Images built at once.")] = 1
    no_cache: Annotated[bool, Opt("--no-cache", help="Rebuild every step.")] = False
    keep_stages: Annotated[
        bool, Opt("--keep-stages", help="Keep the legacy builder's stages: its layer cache.")
    ] = False
    fail_fast: Annotated[
        bool, Opt("--fail-fast/--no-fail-fast", help="Stop at the first failed image.")
    ] = False
    # Off by default so that an air-gapped build fails at once with a hint instead of waiting
    # on DNS.
    pull: Annotated[
        bool,
        Opt("--pull/--no-pull", help="Pull a base image the engine lacks (needs a registry)."),
    ] = False
    labels: Annotated[
        tuple[tuple[str, str], ...],
        Opt(
            "--label",
            help="Extra label KEY=VALUE on every image (repeatable).",
            given_as=list[str] | None,
            parse=partial(pairs, "--label", example="team=ml"),
        ),
    ] = ()
    # BuildKit's registry cache: repositories that hold one cache per image, tagged as it is.
    cache_from: Annotated[
        str | None,
        Opt(
            "--cache-from",
            metavar="REPOSITORY",
            help="BuildKit: reuse the build cache kept in this registry repository.",
        ),
    ] = None
    cache_to: Annotated[
        str | None,
        Opt(
            "--cache-to",
            metavar="REPOSITORY",
            help="BuildKit: save the build cache (every stage) to this registry repository.",
        ),
    ] = None
    compression: Annotated[
        Compression | None,
        Opt(
            "--compression",
            help="Force every layer to this compression (BuildKit, containerd store). "
            "Default: new layers gzip, reused ones as they are.",
        ),
    ] = None
    network: Annotated[
        BuildNetwork,
        Opt("--network", help="The RUN steps' network; none: prove the build needs none."),
    ] = BuildNetwork.DEFAULT
    # SOURCE_DATE_EPOCH (reproducible.epoch_from); None: each image's parent's creation time.
    source_date_epoch: int | None = None

    def __post_init__(self) -> None:
        # A value given as its text ("zstd", "none") is taken as its member: one type inside.
        if self.compression is not None:
            object.__setattr__(self, "compression", Compression(self.compression))
        object.__setattr__(self, "network", BuildNetwork(self.network))
        self.buildkit.check(self.builder)

    @property
    def buildkit(self) -> BuildkitAsk:
        """The options asked for that only BuildKit has."""
        return BuildkitAsk(self.cache_from, self.cache_to, self.compression)


@dataclass(frozen=True)
class BuildCommand:
    """Build the images of the matrix (slim before full), skipping those up to date."""

    selection: Selection
    settings: BuildSettings = field(default_factory=BuildSettings)
    inputs: RenderInputs = field(default_factory=RenderInputs)
    results: Annotated[Path, RESULTS] = Path("results")
    json: Annotated[bool, JSON] = False


@dataclass(frozen=True)
class BakeRequest:
    """Write docker-bake.json for the plan (build it with `docker buildx bake -f FILE`)."""

    selection: Selection
    inputs: RenderInputs
    out: Annotated[Path, Opt("--out", help="The bake file to write.")] = Path("docker-bake.json")
    contexts: Annotated[Path, Opt("--contexts", help="Folder for the build contexts.")] = Path(
        "out/bake"
    )


@dataclass(frozen=True)
class BootstrapCommand:
    """Make a minimal base image with Python from distribution packages (needs mmdebstrap)."""

    suite: Annotated[str, Opt("--suite", help="Debian or Ubuntu suite, e.g. bookworm, noble.")]
    tag: Annotated[
        str,
        Opt("--tag", help="Image name:tag to create, e.g. imagekit-base/debian:bookworm."),
    ]
    mirror: Annotated[
        str | None,
        Opt("--mirror", help="Package mirror (a snapshot mirror makes it reproducible)."),
    ] = None
    include: Annotated[
        tuple[str, ...],
        Opt(
            "--include",
            help="Comma-separated packages to add.",
            given_as=str,
            default=",".join(BASE_PACKAGES),
            parse=comma_separated,
        ),
    ] = BASE_PACKAGES
    packages_for: Annotated[
        Flavour | None,
        Opt(
            "--packages-for",
            help="Also carry the distribution packages that flavour's build steps install "
            "(full: slim's too), so its builds need no package mirror.",
        ),
    ] = None
    security_mirror: Annotated[
        str | None,
        Opt(
            "--security-mirror",
            help="Where the security suite's fixes come from (none: leave them out). Default: "
            "the distribution's own; with --mirror, none unless given.",
        ),
    ] = None
    variant: Annotated[str, Opt("--variant", help="mmdebstrap variant.")] = "minbase"
    docs: Annotated[
        bool,
        Opt(
            "--docs/--no-docs",
            help="Keep manuals, translations and package docs (as -slim images do not).",
        ),
    ] = False
    source_date_epoch: int | None = None  # from SOURCE_DATE_EPOCH (reproducible.epoch_from)
    # None on the line: this machine's (the command asks the engine's host).
    arch: Annotated[
        str,
        Opt(
            "--arch",
            help="Debian architecture: amd64 or arm64 (one other than this machine's runs "
            "through qemu-user-static). Default: this machine's.",
            given_as=str | None,
            default=None,
        ),
    ] = "amd64"

    @property
    def packages(self) -> tuple[str, ...]:
        """What the base is made with: `--include`, then what `--packages-for` adds."""
        extra = packages_for(self.packages_for) if self.packages_for else ()
        return tuple(dict.fromkeys((*self.include, *extra)))

    def __post_init__(self) -> None:
        from imagekit.matrix.plan import IMAGE_REF_RE

        if not IMAGE_REF_RE.match(self.tag) or ":" not in self.tag.rsplit("/", 1)[-1]:
            raise InputError(
                f"--tag {self.tag!r} is not NAME:TAG", "e.g. imagekit-base/debian:bookworm"
            )


@dataclass(frozen=True)
class GcRequest:
    """Remove containers and dangling build-stage images that imagekit left behind.

    Dangling build stages are also the classic builder's layer cache: without them the next
    build of those images starts cold."""

    older_than_s: Annotated[
        float,
        Opt(
            "--older-than",
            help="Only what is older than this: 30s, 10m, 2h, 1d.",
            given_as=str,
            default="0s",
            parse=older_than_s,
        ),
    ] = 0.0
    dry_run: Annotated[bool, Opt("--dry-run/--no-dry-run", help="List, remove nothing.")] = False
    run_id: Annotated[
        str | None,
        Opt("--run-id", help="Only the containers of this run (its io.imagekit.run-id label)."),
    ] = None
