"""Load matrix.yaml, check it against the compatibility data, and expand it into image plans.

`load_matrix` is the boundary: text goes in, a frozen `Matrix` or one
`ValidationError` listing every problem with its `file:line:col` comes out.
Nothing here touches Docker.

The steps, in order, each with one job and its own module; all but the first report into one
`Findings` (`checks.py`):
1. shape: pydantic's errors as located problems (`shape_problems.py`);
2. file-wide settings against the compatibility data (`checks.py`, `check_settings`);
3. each release entry against the compatibility data (`entries.py`, `EntryCheck`), and its
   approved combinations expanded into cells (`expand.py`, `expand_cells`);
4. cells into image plans, minus exclusions (`Planner`), tagged by `Tags.versioned`;
5. the one `latest` cell (`pick_latest`);
6. aliases, including `latest`, given to the plans (`Tags.with_aliases`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path as FsPath

import pydantic

from imagekit.errors import InputError, Problem, ValidationError
from imagekit.kernel.vocabulary import Flavour, Platform
from imagekit.matrix.checks import Findings, check_settings
from imagekit.matrix.compat import CompatData, load_compat
from imagekit.matrix.expand import Planner, Tags, expand_cells, pick_latest
from imagekit.matrix.plan import Cell, ImagePlan, matches
from imagekit.matrix.schema import MatrixFile
from imagekit.matrix.shape_problems import shape_problems
from imagekit.matrix.yamlsrc import SourceMap, load_yaml

# A matrix is a few KB; anything near this is the wrong file (a log, an image, a dump).
# The file is refused before it is parsed, without reading more than this.
MAX_MATRIX_BYTES = 1 << 20


@dataclass(frozen=True)
class Matrix:
    """A validated matrix: the file's settings, its cells and its image plans."""

    path: str
    spec: MatrixFile
    cells: tuple[Cell, ...]
    plans: tuple[ImagePlan, ...]
    latest: Cell
    warnings: tuple[Problem, ...] = ()

    def select(
        self,
        only: list[str] | None = None,
        flavour: Flavour | None = None,
        *,
        platform: Platform | None = None,
        allow_empty: bool = False,
    ) -> list[ImagePlan]:
        """The plans picked by `--only` selectors, `--flavour` and `--platform`; an error if
        none are, unless `allow_empty` (a CI matrix may legitimately be empty)."""
        picked = [
            p
            for p in self.plans
            if matches(only or [], p)
            and flavour in (None, p.flavour)
            and platform in (None, p.platform)
        ]
        if not picked and not allow_empty:
            names = ", ".join(c.id for c in self.cells)
            wanted = f"--only {' '.join(only or [])} --flavour {flavour or 'any'}"
            if platform is not None:
                wanted += f" --platform {platform}"
            raise InputError(f"no image matches {wanted}", f"cells in {self.path}: {names}")
        return picked


def load_matrix(path: str | FsPath, compat: CompatData | None = None) -> Matrix:
    """Read, validate and expand the matrix file at `path`.

    Raises `InputError` when the file cannot be read and `ValidationError` with
    every problem found otherwise; never touches Docker.
    """
    file = str(path)
    try:
        with FsPath(path).open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            # One byte more than the limit tells a file over it from one at it, and a
            # 50 MB file (or /dev/zero) is never read whole.
            raw = handle.read(MAX_MATRIX_BYTES + 1)
    except OSError as exc:
        raise InputError(
            f"cannot read matrix {file}: {exc.strerror or exc}",
            "pass the file with --matrix PATH",
        ) from None
    if len(raw) > MAX_MATRIX_BYTES:
        # A pipe or a device has no size to tell.
        raise ValidationError([_too_large(file, size if size > MAX_MATRIX_BYTES else None)])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = _byte_position(raw, exc.start)
        raise ValidationError(
            [
                Problem(
                    file,
                    line,
                    col,
                    f"not UTF-8 text (byte {exc.start}, 0x{raw[exc.start]:02x})",
                    "a matrix is YAML text: save it as UTF-8 (or pass the right file)",
                )
            ]
        ) from None
    return parse_matrix(text, file, compat)


def _too_large(file: str, size: int | None) -> Problem:
    """The problem of a matrix over `MAX_MATRIX_BYTES`, at the top of the file."""
    shown = f" ({size:,} bytes)" if size is not None else ""
    return Problem(
        file,
        1,
        1,
        f"the matrix file is larger than 1 MiB{shown}, the most imagekit reads; "
        "a matrix is a few KB",
        "check that --matrix names the matrix file (this looks like another file)",
    )


def _byte_position(raw: bytes, offset: int) -> tuple[int, int]:
    """The 1-based line/col of byte `offset`, counting the characters before it on its line."""
    line_start = raw.rfind(b"\n", 0, offset) + 1
    col = len(raw[line_start:offset].decode("utf-8", errors="replace")) + 1
    return raw.count(b"\n", 0, offset) + 1, col


def parse_matrix(text: str, file: str = "matrix.yaml", compat: CompatData | None = None) -> Matrix:
    """Validate and expand matrix text; `file` is the name used in messages."""
    if len(text) > MAX_MATRIX_BYTES:  # characters: each is at least one byte
        raise ValidationError([_too_large(file, len(text.encode("utf-8", "replace")))])
    data, source = load_yaml(text, file)
    if data is None:
        raise ValidationError(
            [Problem(file, 1, 1, "the matrix is empty", "start from the example in README.md")]
        )
    if not isinstance(data, dict):
        raise ValidationError(
            [source.problem((), "the matrix must be a mapping of settings (key: value)")]
        )
    try:
        spec = MatrixFile.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ValidationError([*source.problems, *shape_problems(exc, source)]) from None
    if source.problems:
        raise ValidationError(source.problems)
    return _check_and_expand(spec, source, compat or load_compat(), file)


def _check_and_expand(spec: MatrixFile, source: SourceMap, compat: CompatData, file: str) -> Matrix:
    """Run steps 2-6 on a well-shaped matrix, in order, sharing one `Findings`.

    Returns the `Matrix`, or raises `ValidationError` with every problem found.
    """
    report = Findings(source)
    check_settings(spec, compat, report)
    cells = expand_cells(spec, compat, report)
    tags = Tags(spec.tag_prefix, report)
    plans = Planner(spec, tags, report).plans(cells)
    latest = pick_latest(spec, cells, report)
    if report.problems:
        raise ValidationError(report.problems)
    assert latest is not None
    return Matrix(
        file,
        spec,
        tuple(cells),
        tuple(tags.with_aliases(plans, latest)),
        latest,
        tuple(report.warnings),
    )
