"""The choices of `imagekit build` and the decisions made from them (pure).

Which builder builds (`--builder sdk|buildx|auto`, auto by default) is decided twice: a guess
before the engine is asked anything, so bad render inputs are refused first, and the choice once
the engine's facts are known, with the reason people read. Both are here, with the closed sets
the command takes and the checks of its option values (`--cache-from`/`--cache-to`,
gc's `--older-than`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from imagekit.build.features import Refusal
from imagekit.errors import InputError
from imagekit.kernel.engine import EngineInfo
from imagekit.kernel.vocabulary import BuilderName, EngineName


class BuilderChoice(StrEnum):
    """`--builder`: the Docker SDK (legacy builder), buildx (BuildKit), or BuildKit where it
    builds on this engine (`pick_builder`)."""

    SDK = "sdk"
    BUILDX = "buildx"
    AUTO = "auto"


class Compression(StrEnum):
    """`--compression`: the compression every layer is forced to (BuildKit)."""

    GZIP = "gzip"
    ZSTD = "zstd"


class BuildNetwork(StrEnum):
    """`--network`: the network of the build's RUN steps."""

    DEFAULT = "default"
    NONE = "none"  # proves the build needs no network

    @property
    def mode(self) -> str | None:
        """The network mode a builder is asked for (None: the engine's default)."""
        return None if self is BuildNetwork.DEFAULT else self.value


@dataclass(frozen=True)
class BuildkitAsk:
    """The options asked for that only BuildKit has."""

    cache_from: str | None = None
    cache_to: str | None = None
    compression: Compression | None = None

    @property
    def wants(self) -> list[str]:
        """Those options as the command line names them (empty: none asked)."""
        named = [
            o for o, v in (("--cache-from", self.cache_from), ("--cache-to", self.cache_to)) if v
        ]
        if self.compression:
            named.append(f"--compression {self.compression}")
        return named

    def check(self, builder: BuilderChoice) -> None:
        """InputError when a cache is not a repository's name, or these options are asked of
        the legacy builder (`--builder sdk`); `auto` may take them, and is refused once the
        engine is known if it has no BuildKit."""
        for option, value in (("--cache-from", self.cache_from), ("--cache-to", self.cache_to)):
            if value is not None:
                cache_repository(option, value)
        if self.wants and builder is BuilderChoice.SDK:
            raise InputError(
                f"{' and '.join(self.wants)} need BuildKit, and --builder sdk is the legacy "
                "builder",
                "add --builder buildx (or auto)",
            )


def cache_repository(option: str, value: str) -> str:
    """A build-cache repository (`127.0.0.1:5000/cache/pytorch`): each image's cache is
    tagged as the image is, so the value names a repository, without tag or digest."""
    from imagekit.matrix.plan import REPOSITORY_RE

    last = value.rsplit("/", 1)[-1]
    if "@" in value or ":" in last or not REPOSITORY_RE.match(value):
        raise InputError(
            f"{option} {value!r} is not a repository name",
            "give a repository such as 127.0.0.1:5000/cache/pytorch: each image's cache is "
            "tagged there as the image is",
        )
    return value


class BuilderCause(StrEnum):
    """Why the builder of a run is the one it is."""

    ASKED = "asked"  # --builder sdk or --builder buildx
    PLUGIN = "plugin"  # auto: the buildx plugin answers, on an engine with BuildKit
    NO_PLUGIN = "no-plugin"  # auto: no buildx plugin answers
    NO_BUILDKIT = "no-buildkit"  # auto: the engine's API has no BuildKit (Podman, old Docker)


@dataclass(frozen=True)
class BuilderPick:
    """The builder a run uses and why, in the words `imagekit build` says first and records."""

    builder: BuilderName
    cause: BuilderCause
    why: str

    @property
    def buildx(self) -> bool:
        """Whether BuildKit builds, through buildx."""
        return self.builder is BuilderName.BUILDX

    @property
    def line(self) -> str:
        """`builder: buildx (BuildKit: the buildx plugin 0.13.1 on Docker 26.1.5)`."""
        return f"builder: {self.builder} ({self.why})"


def guess_buildx(choice: BuilderChoice, plugin: str | None) -> bool:
    """Whether the build will likely use buildx, before the engine is asked (the render inputs
    are checked for it, and again if the engine decides otherwise). `plugin` is the buildx
    plugin's version (None: it does not answer)."""
    return choice is BuilderChoice.BUILDX or (choice is BuilderChoice.AUTO and plugin is not None)


def builder_refusal(
    choice: BuilderChoice, *, has_buildkit: bool, plugin: str | None, engine: str
) -> Refusal | None:
    """Why `--builder buildx` cannot build on this engine (None: it can, or it was not asked)."""
    if choice is not BuilderChoice.BUILDX:
        return None
    if not has_buildkit:
        return Refusal(
            f"{engine}: its Docker API has no BuildKit, so buildx cannot use it",
            "use --builder sdk (or auto, which picks it on this engine)",
        )
    if plugin is None:
        return Refusal(
            "the docker buildx plugin is not installed", "use --builder sdk, or `make engine`"
        )
    return None


def pick_builder(choice: BuilderChoice, *, plugin: str | None, engine: EngineInfo) -> BuilderPick:
    """The builder that builds, and why: the one asked for, or for `auto` BuildKit where the
    buildx plugin answers (`plugin`: its version) and the engine's API has BuildKit, else the
    legacy builder (Podman: buildx would try to pull a BuildKit image and fail). A refused
    `--builder buildx` (`builder_refusal`) never gets here."""
    on = f"the buildx plugin {plugin} on {engine.title}"
    if choice is BuilderChoice.SDK:
        return BuilderPick(BuilderName.SDK, BuilderCause.ASKED, "legacy: --builder sdk")
    if choice is BuilderChoice.BUILDX:
        return BuilderPick(
            BuilderName.BUILDX, BuilderCause.ASKED, f"BuildKit: --builder buildx, {on}"
        )
    if not engine.has_buildkit:
        api = f" {engine.api_version}" if engine.name is EngineName.DOCKER else ""
        why = f"legacy: {engine.title}'s API{api} has no BuildKit"
        return BuilderPick(BuilderName.SDK, BuilderCause.NO_BUILDKIT, why)
    if plugin is None:
        why = "legacy: no docker buildx plugin answers (`make engine` installs one)"
        return BuilderPick(BuilderName.SDK, BuilderCause.NO_PLUGIN, why)
    return BuilderPick(BuilderName.BUILDX, BuilderCause.PLUGIN, f"BuildKit: {on}")


DURATION_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def older_than_s(text: str) -> float:
    """`--older-than` (`30s`, `10m`, `2h`, `1d`) in seconds."""
    if len(text) < 2 or text[-1] not in DURATION_UNITS_S or not text[:-1].isdigit():
        raise InputError(f"--older-than {text!r} is not a duration", "e.g. 30s, 10m, 2h, 1d")
    return float(int(text[:-1]) * DURATION_UNITS_S[text[-1]])
