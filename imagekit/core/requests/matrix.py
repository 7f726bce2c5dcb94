"""The requests of the commands that read the matrix: matrix, check, render, compat, schema,
tags, and those that follow upstream: matrix refresh, compat verify."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from imagekit.core.requests.options import JSON, MATRIX, MatrixFormat, Opt
from imagekit.core.requests.selection import RenderInputs, Selection
from imagekit.errors import InputError

if TYPE_CHECKING:
    from imagekit.core.upstream import CompatSource


@dataclass(frozen=True)
class MatrixRequest:
    """List the images the matrix expands to."""

    selection: Selection
    format: Annotated[str, Opt("--format", help="Output format.", choices=MatrixFormat)] = "table"


@dataclass(frozen=True)
class CheckRequest:
    """Validate the matrix and lint every rendered Dockerfile (exit 0 or 2)."""

    matrix: Annotated[Path, MATRIX] = Path("matrix.yaml")
    json: Annotated[bool, JSON] = False


@dataclass(frozen=True)
class RenderRequest:
    """Write a Dockerfile and build context per image (one folder each)."""

    selection: Selection
    inputs: RenderInputs
    out: Annotated[Path, Opt("--out", help="Folder for the build contexts.", after="matrix")] = (
        Path("out")
    )
    buildkit: Annotated[
        bool,
        Opt(
            "--buildkit/--no-buildkit",
            help="Render BuildKit syntax (cache, secrets).",
            after="extra_index_urls",
        ),
    ] = False
    check: Annotated[
        bool, Opt("--check", help="Compare with what --out holds; exit 1 if different.")
    ] = False
    json: Annotated[bool, JSON] = False


@dataclass(frozen=True)
class CompatRequest:
    """Show the compatibility table (or one release)."""

    torch: Annotated[str | None, Opt("--torch", help="Show one release, e.g. 2.8.0.")] = None
    json: Annotated[bool, JSON] = False


@dataclass(frozen=True)
class ExplainRequest:
    """Explain one cell: what it derives to, or why it cannot be built."""

    torch: Annotated[str, Opt("--torch", help="PyTorch release, e.g. 2.8.0.")]
    cuda: Annotated[str, Opt("--cuda", help="CUDA version, e.g. 12.8, or cpu.")]
    python: Annotated[str | None, Opt("--python", help="Python, e.g. 3.12.")] = None
    os: Annotated[str | None, Opt("--os", help="Base OS, e.g. ubuntu-24.04.")] = None
    json: Annotated[bool, JSON] = False


@dataclass(frozen=True)
class SchemaRequest:
    """Print the JSON Schema of matrix.yaml (or of a results record, or of the verify
    attestation's predicate), for editors and CI."""

    out: Annotated[Path | None, Opt("--out", help="Write to this file instead of stdout.")] = None
    results: Annotated[bool, Opt("--results", help="The schema of a results record instead.")] = (
        False
    )
    attestation: Annotated[
        bool,
        Opt(
            "--attestation",
            help="The schema of the verify attestation's predicate "
            "(https://imagekit.dev/attestations/verify/v1) instead.",
        ),
    ] = False

    def __post_init__(self) -> None:
        if self.results and self.attestation:
            raise InputError("--results and --attestation name two schemas; pick one")


@dataclass(frozen=True)
class TagsRequest:
    """List every tag publish would push: versioned (immutable) and aliases (may move)."""

    selection: Selection
    registry: Annotated[str | None, Opt("--registry", help="Push to this registry instead.")] = None
    json: Annotated[bool, JSON] = False


COMPAT = Opt("--compat", help="The compatibility data file (default: the one imagekit ships).")


def _compat_source(compat: Path | None) -> CompatSource:
    from imagekit.core.compat import compat_path
    from imagekit.core.upstream import read_compat

    path = compat or compat_path()
    return read_compat(read_input(path), str(path))


@dataclass(frozen=True)
class RefreshRequest:
    """Propose the torch releases and variants the package indexes hold that the matrix lacks,
    with the facts their wheels state (with --write, apply them).

    Reads each index's simple API (PEP 503/691) and each wheel's METADATA (PEP 658, else
    ranges of the wheel). Counts the newest patch of each minor series from --since on."""

    matrix: Annotated[Path, MATRIX] = Path("matrix.yaml")
    indexes: Annotated[
        tuple[str, ...],
        Opt(
            "--index",
            help="A package index's simple API, e.g. https://pypi.org/simple (repeatable; "
            "default: PyPI). A per-variant index is one more: .../whl/cu130.",
            envvar="IMAGEKIT_INDEX",
        ),
    ] = ()
    compat: Annotated[Path | None, COMPAT] = None
    since: Annotated[
        str | None,
        Opt("--since", help="The oldest release that counts (default: the matrix's oldest)."),
    ] = None
    write: Annotated[bool, Opt("--write", help="Apply the proposal to both files.")] = False
    json: Annotated[bool, JSON] = False

    def __post_init__(self) -> None:
        if self.since is not None and not re.fullmatch(r"\d+\.\d+\.\d+", self.since):
            raise InputError(f"--since {self.since!r} is not a release like 2.13.0")

    @property
    def index_urls(self) -> tuple[str, ...]:
        """The indexes to read: those given, else PyPI."""
        from imagekit.core.compat import PYPI_SIMPLE

        return self.indexes or (PYPI_SIMPLE,)

    def sources(self) -> tuple[tuple[str, str], CompatSource]:
        """The matrix (file, text) and the compatibility data, read and checked."""
        return (str(self.matrix), read_input(self.matrix)), _compat_source(self.compat)


@dataclass(frozen=True)
class CompatVerifyRequest:
    """Check every fact of the compatibility data that a torch wheel on hand can confirm
    against that wheel's METADATA (exit 2 on a disagreement; folders not there are skipped)."""

    wheelhouses: Annotated[
        tuple[Path, ...], Opt("--wheelhouse", help="A folder of wheels (repeatable).")
    ] = ()
    compat: Annotated[Path | None, COMPAT] = None

    def source(self) -> CompatSource:
        """The compatibility data, read and checked."""
        return _compat_source(self.compat)


def read_input(path: Path) -> str:
    """An input file's text; a missing or unreadable one is bad input, named."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(
            f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})"
        ) from None
