"""Which images of which matrix: the part the requests of several commands share."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from imagekit.errors import InputError
from imagekit.kernel.options import FLAVOUR, MATRIX, ONLY, PLATFORM
from imagekit.kernel.vocabulary import Flavour, Platform

if TYPE_CHECKING:  # imported lazily: `imagekit probe` must not load jinja2
    from imagekit.matrix.load import Matrix
    from imagekit.matrix.plan import ImagePlan


@dataclass(frozen=True)
class Selection:
    """Which images of which matrix: `--matrix`, `--only`, `--flavour`, `--platform`."""

    matrix: Annotated[Path, MATRIX] = Path("matrix.yaml")
    only: Annotated[tuple[str, ...], ONLY] = ()
    flavour: Annotated[Flavour | None, FLAVOUR] = None
    platform: Annotated[Platform | None, PLATFORM] = None

    def load(self) -> Matrix:
        """The matrix, or every problem of the matrix file at once."""
        from imagekit.matrix.load import load_matrix

        return load_matrix(self.matrix)

    def beside(self, images: tuple[str, ...]) -> None:
        """Refuse --only and --flavour beside images named: they pick images of the matrix."""
        if images and (self.only or self.flavour):
            raise InputError(
                "--only and --flavour pick images of the matrix, not those named",
                "name the images, or use --only/--flavour without them",
            )

    def plans(self, loaded: Matrix | None = None, *, allow_empty: bool = False) -> list[ImagePlan]:
        """The selected plans of the matrix."""
        matrix = loaded or self.load()
        return matrix.select(
            list(self.only) or None,
            self.flavour,
            platform=self.platform,
            allow_empty=allow_empty,
        )


def pairs(
    option: str,
    items: Iterable[str],
    example: str,
    shape: str = "KEY=VALUE",
    *,
    whole: bool = False,
) -> tuple[tuple[str, str], ...]:
    """`A=B` items as pairs, refusing any that is not one (`whole`: nor one with B empty)."""
    found = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or (whole and not value):
            raise InputError(f"{option} {item!r} is not {shape}", f"e.g. {option} {example}")
        found.append((key, value))
    return tuple(found)
