"""The requests of the commands that read the matrix: matrix, check, compat, explain, schema,
tags."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated

from imagekit.errors import InputError
from imagekit.kernel.options import JSON, MATRIX, REGISTRY, Opt
from imagekit.matrix.selection import Selection


class MatrixFormat(StrEnum):
    """How `imagekit matrix` prints the plans: a table, JSON, or GitHub's job matrix."""

    table = "table"
    json = "json"
    github = "github"


@dataclass(frozen=True)
class MatrixRequest:
    """List the images the matrix expands to."""

    selection: Selection
    format: Annotated[
        MatrixFormat, Opt("--format", help="Output format.", choices=MatrixFormat)
    ] = MatrixFormat.table


@dataclass(frozen=True)
class CheckRequest:
    """Validate the matrix and lint every rendered Dockerfile (exit 0 or 2)."""

    matrix: Annotated[Path, MATRIX] = Path("matrix.yaml")
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
    registry: Annotated[str | None, REGISTRY] = None
    json: Annotated[bool, JSON] = False
