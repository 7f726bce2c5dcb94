"""The choices of `imagekit build` and the decisions made from them (pure).

Which builder builds (`--builder sdk|buildx|auto`) is decided twice: a guess before the engine
is asked anything, so bad render inputs are refused first, and the choice once the engine's
facts are known. Both are here, with the closed sets the command takes and the checks of its
option values (`--cache-from`/`--cache-to`, gc's `--older-than`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from imagekit.build.features import Refusal
from imagekit.errors import InputError


class BuilderChoice(StrEnum):
    """`--builder`: the Docker SDK (legacy builder), buildx (BuildKit), or buildx if present."""

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


def guess_buildx(choice: BuilderChoice, plugin: Callable[[], bool]) -> bool:
    """Whether the build will likely use buildx, before the engine is asked (the render inputs
    are checked for it, and again if the engine decides otherwise). `plugin` says whether the
    buildx plugin is installed; it is asked only for `auto`."""
    return choice is BuilderChoice.BUILDX or (choice is BuilderChoice.AUTO and plugin())


def builder_refusal(
    choice: BuilderChoice, *, has_buildkit: bool, plugin: Callable[[], bool], engine: str
) -> Refusal | None:
    """Why `--builder buildx` cannot build on this engine (None: it can, or it was not asked)."""
    if choice is not BuilderChoice.BUILDX:
        return None
    if not has_buildkit:
        return Refusal(
            f"{engine}: its Docker API has no BuildKit, so buildx cannot use it",
            "use --builder sdk (or auto, which picks it on this engine)",
        )
    if not plugin():
        return Refusal(
            "the docker buildx plugin is not installed", "use --builder sdk, or `make engine`"
        )
    return None


def use_buildx(choice: BuilderChoice, *, has_buildkit: bool, plugin: Callable[[], bool]) -> bool:
    """Whether buildx builds: asked for, or `auto` where the engine has BuildKit and the plugin
    is there. Otherwise the SDK builder (Podman: buildx would try to pull a BuildKit image and
    fail)."""
    if choice is BuilderChoice.BUILDX:
        return True
    return choice is BuilderChoice.AUTO and has_buildkit and plugin()


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


DURATION_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def older_than_s(text: str) -> float:
    """`--older-than` (`30s`, `10m`, `2h`, `1d`) in seconds."""
    if len(text) < 2 or text[-1] not in DURATION_UNITS_S or not text[:-1].isdigit():
        raise InputError(f"--older-than {text!r} is not a duration", "e.g. 30s, 10m, 2h, 1d")
    return float(int(text[:-1]) * DURATION_UNITS_S[text[-1]])
