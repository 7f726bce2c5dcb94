"""What each command is asked to do: one frozen value per command, made from its options.

A command's Typer function does one thing: turn its options into its request and hand it to
`dispatch`. Everything after that reads the request, never the options, so an option that does
not reach its request cannot exist unnoticed (tests/test_cli_options.py sets every option of
every command and checks that it arrives). Pure values; the checks here need no Docker.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from imagekit.core.build_options import BuilderChoice, BuildkitAsk, BuildNetwork, Compression
from imagekit.core.probe_contract import ProbeDevice
from imagekit.core.runtime import DEFAULT_SHM_BYTES, GpuChoice
from imagekit.errors import InputError

if TYPE_CHECKING:  # imported lazily: `imagekit probe` must not load jinja2 or docker
    from imagekit.core.context import ContextInputs
    from imagekit.core.matrix import Matrix
    from imagekit.core.plan import ImagePlan
    from imagekit.core.publish import PublishSettings
    from imagekit.core.render import RenderOptions

# Shared parts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """Which images of which matrix: `--matrix`, `--only`, `--flavour`, `--platform`."""

    matrix: Path = Path("matrix.yaml")
    only: tuple[str, ...] = ()
    flavour: str | None = None
    platform: str | None = None

    def load(self) -> Matrix:
        """The matrix, or every problem of the matrix file at once."""
        from imagekit.core.matrix import load_matrix

        return load_matrix(self.matrix)

    def plans(self, loaded: Matrix | None = None, *, allow_empty: bool = False) -> list[ImagePlan]:
        """The selected plans of the matrix."""
        matrix = loaded or self.load()
        return matrix.select(
            list(self.only) or None,
            self.flavour,
            platform=self.platform,
            allow_empty=allow_empty,
        )


def pairs(option: str, items: tuple[str, ...], example: str) -> tuple[tuple[str, str], ...]:
    """`A=B` items as pairs, refusing any that is not one."""
    found = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"{option} {item!r} is not KEY=VALUE", f"e.g. {option} {example}")
        found.append((key, value))
    return tuple(found)


def uv_platforms(plans: Iterable[ImagePlan]) -> set[str]:
    """The platforms whose builder stage runs uv: those of the slim images (full installs its
    packages with its slim's own pip)."""
    return {p.platform for p in plans if p.flavour == "slim"}


@dataclass(frozen=True)
class RenderInputs:
    """The options that shape a rendered Dockerfile and its context (render, build, bake)."""

    wheelhouse: Path | None = None
    ca_cert: Path | None = None
    no_ca_cert: bool = False
    pip_index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    created: str | None = None
    revision: str | None = None
    base_overrides: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        wheelhouse: Path | None,
        ca_cert: Path | None,
        no_ca_cert: bool,
        pip_index_url: str | None,
        extra_index_urls: list[str] | None,
        created: str | None,
        revision: str | None,
        base_overrides: list[str] | None,
    ) -> RenderInputs:
        """From the options of the same names (repeatable ones arrive as lists or None)."""
        return cls(
            wheelhouse,
            ca_cert,
            no_ca_cert,
            pip_index_url,
            tuple(extra_index_urls or ()),
            created,
            revision,
            tuple(base_overrides or ()),
        )

    def resolve(
        self,
        *,
        buildkit: bool,
        environ: Mapping[str, str] | None = None,
        platforms: Iterable[str] = (),
    ) -> tuple[RenderOptions, ContextInputs]:
        """Check the inputs and turn them into render options and context files; `platforms`
        are those of the images to render (uv for each one this machine emulates)."""
        from imagekit.adapters.installer import foreign_installers
        from imagekit.core.context import ContextInputs, check_wheelhouse, resolve_ca_bundle
        from imagekit.core.render import RenderOptions

        ca = None if self.no_ca_cert else resolve_ca_bundle(self.ca_cert, environ)
        if self.wheelhouse is not None:
            # An empty one would only fail at build time, as an obscure `COPY failed`.
            check_wheelhouse(self.wheelhouse)
        overrides = base_override_pairs(self.base_overrides)
        options = RenderOptions(
            wheelhouse=self.wheelhouse is not None,
            ca_bundle=ca is not None,
            pip_index_url=self.pip_index_url,
            extra_index_urls=self.extra_index_urls,
            buildkit=buildkit,
            created=self.created,
            revision=self.revision,
            base_overrides=overrides,
        )
        foreign = foreign_installers(platforms, self.wheelhouse)
        return options, ContextInputs(
            wheelhouse=self.wheelhouse, ca_bundle=ca, foreign_installers=foreign
        )


def base_override_pairs(items: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """`--base-override IMAGE=LOCAL_IMAGE` items as (image, local image) pairs."""
    overrides = []
    for item in items:
        source, sep, target = item.partition("=")
        if not sep or not source or not target:
            raise InputError(
                f"--base-override {item!r} is not IMAGE=LOCAL_IMAGE",
                "e.g. --base-override ubuntu:24.04=imagekit-base/ubuntu:noble",
            )
        overrides.append((source, target))
    return tuple(overrides)


# Commands that read the matrix ---------------------------------------------------------------


@dataclass(frozen=True)
class MatrixRequest:
    """`imagekit matrix`."""

    selection: Selection
    format: str = "table"


@dataclass(frozen=True)
class CheckRequest:
    """`imagekit check`."""

    matrix: Path
    json: bool = False


@dataclass(frozen=True)
class RenderRequest:
    """`imagekit render`."""

    selection: Selection
    inputs: RenderInputs
    out: Path = Path("out")
    buildkit: bool = False
    check: bool = False
    json: bool = False


@dataclass(frozen=True)
class CompatRequest:
    """`imagekit compat`."""

    torch: str | None = None
    json: bool = False


@dataclass(frozen=True)
class ExplainRequest:
    """`imagekit compat explain`."""

    torch: str
    cuda: str
    python: str | None = None
    os: str | None = None
    json: bool = False


@dataclass(frozen=True)
class SchemaRequest:
    """`imagekit schema`: of matrix.yaml, or with `results` of a results record, or with
    `attestation` of the verify attestation's predicate."""

    out: Path | None = None
    results: bool = False
    attestation: bool = False

    def __post_init__(self) -> None:
        if self.results and self.attestation:
            raise InputError("--results and --attestation name two schemas; pick one")


@dataclass(frozen=True)
class TagsRequest:
    """`imagekit tags`."""

    selection: Selection
    registry: str | None = None
    json: bool = False


# Commands that make images -------------------------------------------------------------------


@dataclass(frozen=True)
class BuildCommand:
    """`imagekit build`."""

    selection: Selection
    inputs: RenderInputs
    builder: BuilderChoice = BuilderChoice.SDK
    jobs: int = 1
    no_cache: bool = False
    fail_fast: bool = False
    pull: bool = False
    labels: tuple[tuple[str, str], ...] = ()
    results: Path = Path("results")
    json: bool = False
    cache_from: str | None = None
    cache_to: str | None = None
    compression: Compression | None = None
    network: BuildNetwork = BuildNetwork.DEFAULT

    def __post_init__(self) -> None:
        for option, value in (("--cache-from", self.cache_from), ("--cache-to", self.cache_to)):
            if value is not None:
                cache_repository(option, value)
        wants = self.buildkit.wants
        if wants and self.builder is BuilderChoice.SDK:
            raise InputError(
                f"{' and '.join(wants)} need BuildKit, and --builder sdk is the legacy builder",
                "add --builder buildx (or auto)",
            )

    @property
    def buildkit(self) -> BuildkitAsk:
        """The options asked for that only BuildKit has."""
        return BuildkitAsk(self.cache_from, self.cache_to, self.compression)


def cache_repository(option: str, value: str) -> str:
    """A build-cache repository (`127.0.0.1:5000/cache/pytorch`): each image's cache is
    tagged as the image is, so the value names a repository, without tag or digest."""
    from imagekit.core.plan import REPOSITORY_RE

    last = value.rsplit("/", 1)[-1]
    if "@" in value or ":" in last or not REPOSITORY_RE.match(value):
        raise InputError(
            f"{option} {value!r} is not a repository name",
            "give a repository such as 127.0.0.1:5000/cache/pytorch: each image's cache is "
            "tagged there as the image is",
        )
    return value


@dataclass(frozen=True)
class BakeRequest:
    """`imagekit bake`."""

    selection: Selection
    inputs: RenderInputs
    out: Path = Path("docker-bake.json")
    contexts: Path = Path("out/bake")


@dataclass(frozen=True)
class BootstrapCommand:
    """`imagekit base bootstrap`."""

    suite: str
    tag: str
    mirror: str | None = None
    include: tuple[str, ...] = ("python3", "python3-venv", "ca-certificates")
    variant: str = "minbase"
    docs: bool = False
    source_date_epoch: int | None = None
    arch: str = "amd64"

    def __post_init__(self) -> None:
        from imagekit.core.plan import IMAGE_REF_RE

        if not IMAGE_REF_RE.match(self.tag) or ":" not in self.tag.rsplit("/", 1)[-1]:
            raise InputError(
                f"--tag {self.tag!r} is not NAME:TAG", "e.g. imagekit-base/debian:bookworm"
            )

    @staticmethod
    def epoch_from(environ: Mapping[str, str]) -> int | None:
        """SOURCE_DATE_EPOCH, checked: seconds since 1970 for a reproducible base."""
        text = environ.get("SOURCE_DATE_EPOCH")
        if text is not None and not text.isdigit():
            raise InputError(f"SOURCE_DATE_EPOCH={text!r} is not a number of seconds")
        return int(text) if text else None


DURATION_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_s(option: str, text: str) -> float:
    """`30s`, `10m`, `2h`, `1d` in seconds."""
    if len(text) < 2 or text[-1] not in DURATION_UNITS_S or not text[:-1].isdigit():
        raise InputError(f"{option} {text!r} is not a duration", "e.g. 30s, 10m, 2h, 1d")
    return float(int(text[:-1]) * DURATION_UNITS_S[text[-1]])


@dataclass(frozen=True)
class GcRequest:
    """`imagekit gc`."""

    older_than_s: float = 0.0
    dry_run: bool = False
    run_id: str | None = None


# Commands that prove and publish images ------------------------------------------------------


def record_name(reference: str) -> str:
    """A file-safe record name for an image reference."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", reference.split("/")[-1]).strip("_") or "image"


@dataclass(frozen=True)
class VerifyCommand:
    """`imagekit verify`: the images named, or the selection of the matrix (not both)."""

    selection: Selection
    images: tuple[str, ...] = ()
    gpus: GpuChoice = GpuChoice.AUTO
    probes: tuple[str, ...] = ()
    timeout_s: float | None = None
    shm_bytes: int = DEFAULT_SHM_BYTES
    structure: bool = True
    probes_dir: Path | None = None
    nodes: int = 1
    results: Path = Path("results")
    json: bool = False

    def __post_init__(self) -> None:
        positive("--timeout-s", self.timeout_s)
        if self.shm_bytes < 1:
            raise InputError(
                f"--shm-size {self.shm_bytes} is not a size in bytes", "e.g. 2147483648"
            )
        if self.images and (self.selection.only or self.selection.flavour):
            raise InputError(
                "--only and --flavour pick images of the matrix; they do not apply to images "
                "named on the command line",
                "name the images, or use --only/--flavour without them",
            )


def positive(option: str, seconds: float | None) -> None:
    """A time limit, when given, is a positive number of seconds."""
    if seconds is not None and not seconds > 0:
        raise InputError(
            f"{option} {seconds:g} is not a time limit", "give seconds > 0, or leave it out"
        )


def probe_names(text: str | None) -> tuple[str, ...]:
    """`--probes a,b` as names."""
    return tuple(p for p in (text or "").split(",") if p)


@dataclass(frozen=True)
class ProbeCommand:
    """`imagekit probe` (host mode)."""

    probes: tuple[str, ...] = ()
    device: ProbeDevice = ProbeDevice.AUTO
    timeout_s: float | None = None
    nodes: int = 1
    out: Path | None = None
    json: bool = False

    def __post_init__(self) -> None:
        positive("--timeout-s", self.timeout_s)


@dataclass(frozen=True)
class ReportRequest:
    """`imagekit report`."""

    runs: tuple[Path, ...] = ()
    results: Path = Path("results")
    threshold: float = 0.2

    def __post_init__(self) -> None:
        if len(self.runs) > 2:
            raise InputError("report takes one run, or two to compare")


@dataclass(frozen=True)
class PublishCommand:
    """`imagekit publish`."""

    selection: Selection
    registry: str | None = None
    dry_run: bool = False
    force: bool = False
    candidate: str | None = None
    from_candidate: str | None = None
    attempts: int = 4
    backoff_s: float = 2.0
    deadline_s: float = 300.0
    results: Path = Path("results")
    json: bool = False
    # A cosign private key (file, or a URI cosign resolves): sign and attest each digest.
    signing_key: str | None = None

    def __post_init__(self) -> None:
        if self.candidate and self.from_candidate:
            raise InputError(
                "--candidate pushes a candidate and --from-candidate publishes one; pick one"
            )

    def settings(self) -> PublishSettings:
        """What to publish and how: the mode is decided here, once, from `--candidate` and
        `--from-candidate` (neither: push the final tags)."""
        from imagekit.core.publish import PublishMode, PublishSettings

        mode = PublishMode.PUSH
        if self.candidate:
            mode = PublishMode.CANDIDATE
        elif self.from_candidate:
            mode = PublishMode.PROMOTION
        candidate = self.candidate or self.from_candidate or ""
        return PublishSettings(mode, candidate, self.registry, self.dry_run, self.force)

    @property
    def signing(self) -> str | None:
        """The key to sign with: none on a dry run, which pushes nothing to sign."""
        return None if self.dry_run else self.signing_key


@dataclass(frozen=True)
class RunCommand:
    """`imagekit run`: a service, a shell, or a command in an image."""

    image: str
    service: str = "jupyter"  # jupyter | ssh | tensorboard | shell | command
    command: tuple[str, ...] = ()
    authorized_keys: Path | None = None
    workspace: Path = Path(".")
    gpus: GpuChoice = GpuChoice.AUTO
    ports: tuple[tuple[int, int], ...] = ()  # (container port, host port)
    user: str | None = None  # docker's --user: the service runs as exactly this user

    @staticmethod
    def parse_user(value: str | None) -> str | None:
        """`--user` as docker takes it: NAME or UID, with an optional :GROUP or :GID."""
        if value is None:
            return None
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?", value):
            raise InputError(
                f"--user {value!r} is not USER[:GROUP]", "e.g. --user 1000:1000 or --user ml"
            )
        return value

    @staticmethod
    def pick_service(flags: Mapping[str, bool], command: tuple[str, ...]) -> str:
        """The one service the flags name (default jupyter), or `command` after `--`."""
        chosen = [name for name, on in flags.items() if on]
        if len(chosen) > 1 or (chosen and command):
            raise InputError("pick one of --jupyter, --ssh, --tensorboard, --shell or -- CMD")
        return chosen[0] if chosen else ("command" if command else "jupyter")

    @staticmethod
    def parse_ports(items: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
        """`HOST:CONTAINER` items as (container, host) pairs."""
        found = []
        for item in items:
            host, sep, inside = item.partition(":")
            if not sep or not host.isdigit() or not inside.isdigit():
                raise InputError(f"--port {item!r} is not HOST:CONTAINER", "e.g. --port 18888:8888")
            found.append((int(inside), int(host)))
        return tuple(found)

    def __post_init__(self) -> None:
        if not self.workspace.is_dir():
            raise InputError(f"--workspace {self.workspace} is not a folder")


@dataclass(frozen=True)
class DoctorRequest:
    """`imagekit doctor`: images by reference, and/or the images of a matrix."""

    images: tuple[str, ...] = ()
    matrix: Path | None = None
    only: tuple[str, ...] = ()
    flavour: str | None = None
    nvidia_smi: Path | None = None
    json: bool = False
    key: str | None = None  # a cosign public key: show each --image's attested level
    platform: str | None = None

    def __post_init__(self) -> None:
        if (self.only or self.platform) and self.matrix is None:
            option = "--only" if self.only else "--platform"
            raise InputError(f"{option} picks images of a matrix", "add --matrix FILE")
        if self.key and not self.images:
            raise InputError("--key checks the attestations of --image IMAGE", "add --image")


LEVEL_NAMES = ("static", "cpu", "gpu")


@dataclass(frozen=True)
class AttestVerifyRequest:
    """`imagekit attest verify`: is this image signed by the key, and does its attested verify
    record reach what is required?"""

    image: str
    key: str
    require_level: str | None = None
    require_probes: tuple[str, ...] = ()
    json: bool = False

    def __post_init__(self) -> None:
        if self.require_level is not None and self.require_level not in LEVEL_NAMES:
            raise InputError(
                f"--require-level {self.require_level!r} is not a level",
                "one of " + ", ".join(LEVEL_NAMES),
            )
