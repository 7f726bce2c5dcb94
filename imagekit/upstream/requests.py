"""The requests of the commands that follow upstream: matrix refresh, compat verify."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from imagekit.errors import InputError
from imagekit.kernel.options import JSON, MATRIX, Opt

COMPAT = Opt("--compat", help="The compatibility data file (default: the one imagekit ships).")


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
        from imagekit.matrix.compat import PYPI_SIMPLE

        return self.indexes or (PYPI_SIMPLE,)


@dataclass(frozen=True)
class CompatVerifyRequest:
    """Check every fact of the compatibility data that a torch wheel on hand can confirm
    against that wheel's METADATA (exit 2 on a disagreement; folders not there are skipped)."""

    wheelhouses: Annotated[
        tuple[Path, ...], Opt("--wheelhouse", help="A folder of wheels (repeatable).")
    ] = ()
    compat: Annotated[Path | None, COMPAT] = None
