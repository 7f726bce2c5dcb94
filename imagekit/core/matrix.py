"""Load matrix.yaml, check it against the compatibility data, and expand it into image plans.

`load_matrix` is the boundary: text goes in, a frozen `Matrix` or one
`ValidationError` listing every problem with its `file:line:col` comes out.
Nothing here touches Docker.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from pathlib import Path as FsPath
from typing import Any

import pydantic

from imagekit.core.compat import CPU, CompatData, load_compat, variant_tag, version_key
from imagekit.core.matrix_schema import Entry, MatrixFile, Selector
from imagekit.core.plan import (
    FLAVOURS,
    IMAGE_REF_RE,
    Cell,
    ImagePlan,
    matches,
    repository_problem,
    tag_problem,
)
from imagekit.core.yamlsrc import Path, Scalar, SourceMap, load_yaml
from imagekit.errors import InputError, Problem, ValidationError

_FIELD_HINTS = {
    "torch": 'a torch release like "2.8.0"',
    "cuda": 'a CUDA version like "12.8", or "cpu"',
    "python": 'a Python version like "3.12"',
    "gpu_archs": 'a GPU architecture like "sm_90"',
    "name": "lowercase letters, digits, '.', '_' and '-'",
}
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789._-")


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
        flavour: str | None = None,
        *,
        allow_empty: bool = False,
    ) -> list[ImagePlan]:
        """The plans picked by `--only` selectors and `--flavour`; an error if none are,
        unless `allow_empty` (a CI matrix may legitimately be empty)."""
        picked = [
            p
            for p in self.plans
            if matches(only or [], p) and (flavour is None or p.flavour == flavour)
        ]
        if not picked and not allow_empty:
            names = ", ".join(c.id for c in self.cells)
            raise InputError(
                f"no image matches --only {' '.join(only or [])} --flavour {flavour or 'any'}",
                f"cells in {self.path}: {names}",
            )
        return picked


def load_matrix(path: str | FsPath, compat: CompatData | None = None) -> Matrix:
    """Read, validate and expand the matrix file at `path`.

    Raises `InputError` when the file cannot be read and `ValidationError` with
    every problem found otherwise; never touches Docker.
    """
    file = str(path)
    try:
        raw = FsPath(path).read_bytes()
    except OSError as exc:
        raise InputError(
            f"cannot read matrix {file}: {exc.strerror or exc}",
            "pass the file with --matrix PATH",
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(
            [Problem(file, 1, 1, f"not UTF-8 text (byte {exc.start})", "save it as UTF-8")]
        ) from None
    return parse_matrix(text, file, compat)


def parse_matrix(text: str, file: str = "matrix.yaml", compat: CompatData | None = None) -> Matrix:
    """Validate and expand matrix text; `file` is the name used in messages."""
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
        raise ValidationError([*source.problems, *_shape_problems(exc, source)]) from None
    if source.problems:
        raise ValidationError(source.problems)
    return _Checker(spec, source, compat or load_compat(), file).run()


# Shape errors -----------------------------------------------------------------


def _model_at(loc: Path) -> type[pydantic.BaseModel] | None:
    """The pydantic model that holds the mapping at `loc` (for "did you mean")."""
    model: Any = MatrixFile
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        if field is None:
            return None
        annotation = field.annotation
        for candidate in (annotation, *getattr(annotation, "__args__", ())):
            inner = getattr(candidate, "__args__", (candidate,))
            for item in (candidate, *inner):
                if isinstance(item, type) and issubclass(item, pydantic.BaseModel):
                    model = item
                    break
            else:
                continue
            break
        else:
            return None
    return model if isinstance(model, type) else None


def _shape_problems(exc: pydantic.ValidationError, source: SourceMap) -> list[Problem]:
    problems = []
    for error in exc.errors():
        loc = _document_path(error["loc"], source)
        if source.is_poisoned(loc):
            continue
        field = next((p for p in reversed(loc) if isinstance(p, str)), "")
        kind = error["type"]
        where = ".".join(str(p) for p in loc) or "matrix"
        if kind == "extra_forbidden":
            model = _model_at(loc[:-1])
            known = list(model.model_fields) if model else []
            close = difflib.get_close_matches(str(loc[-1]), known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else ""
            if known:
                hint = (hint + " " if hint else "") + f"known keys: {', '.join(known)}"
            problems.append(source.problem(loc, f"unknown key {loc[-1]!r}", hint, key=True))
        elif kind == "missing":
            parent = ".".join(str(p) for p in loc[:-1]) or "the matrix"
            problems.append(
                source.problem(loc[:-1], f"missing required key {loc[-1]!r} in {parent}")
            )
        elif kind == "string_type" and (scalar := _typed_scalar(source, loc)) is not None:
            if scalar.kind == "null":
                # An empty value, `~` or `null`: "quote it" would not help there.
                expected = _FIELD_HINTS.get(field, "some text")
                problems.append(
                    source.problem(loc, f"{field}: no value given", f"write {expected}")
                )
                continue
            value = error["input"]
            shown = "false" if value is False else "true" if value is True else repr(value)
            noun = "boolean" if scalar.kind == "bool" else scalar.kind
            noun = "number" if noun in ("int", "float") else noun
            problems.append(
                source.problem(
                    loc,
                    f"{field}: YAML read {scalar.text} as the {noun} {shown}, not as text",
                    f'quote it: "{scalar.text}"',
                )
            )
        elif kind == "string_pattern_mismatch":
            expected = _FIELD_HINTS.get(field, f"text matching {error['ctx']['pattern']}")
            problems.append(source.problem(loc, f"{field}: {error['input']!r} is not {expected}"))
        elif kind == "literal_error" and field == "schema_version":
            problems.append(
                source.problem(
                    loc,
                    f"schema_version {error['input']!r} is not supported; this imagekit reads 1",
                )
            )
        else:
            problems.append(source.problem(loc, f"{where}: {error['msg']}"))
    return problems


def _document_path(loc: tuple[str | int, ...], source: SourceMap) -> Path:
    """The path in the document of a pydantic error location.

    pydantic adds union member names ("list[str]") to locations; drop them, but
    keep a key of the document that merely contains "[" (dropping that one left
    an `extra_forbidden` error without its key, and crashed).
    """
    path: Path = ()
    for part in loc:
        if isinstance(part, str) and "[" in part and (*path, part) not in source.values:
            continue
        path = (*path, part)
    return path


def _typed_scalar(source: SourceMap, loc: Path) -> Scalar | None:
    """The unquoted non-text scalar at `loc` (or the one a one-item list was made of)."""
    for path in (loc, loc[:-1]):
        scalar = source.scalars.get(path)
        if scalar is not None and not scalar.quoted and scalar.kind != "str":
            return scalar
    return None


# Meaning -------------------------------------------------------------------------


class _Checker:
    """Checks a well-shaped matrix against the compatibility data and expands it."""

    def __init__(self, spec: MatrixFile, source: SourceMap, compat: CompatData, file: str):
        self.spec = spec
        self.source = source
        self.compat = compat
        self.file = file
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []

    def fail(self, path: Path, message: str, hint: str = "", *, key: bool = False) -> None:
        self.problems.append(self.source.problem(path, message, hint, key=key))

    def run(self) -> Matrix:
        spec = self.spec
        if problem := repository_problem(spec.repository):
            self.fail(("repository",), problem, "e.g. ghcr.io/acme/pytorch")
        self.check_bases()
        if spec.defaults.os not in spec.bases:
            self.fail(("defaults", "os"), self.unknown_os(spec.defaults.os), self.bases_hint())
        self.check_leave_out()
        cells = self.expand()
        plans = self.plan(cells)
        latest = self.pick_latest(cells)
        if self.problems:
            raise ValidationError(self.problems)
        assert latest is not None
        return Matrix(
            self.file,
            spec,
            tuple(cells),
            tuple(plans),
            latest,
            tuple(self.warnings),
        )

    def unknown_os(self, name: str) -> str:
        return f"base OS {name!r} has no entry under `bases`"

    def bases_hint(self) -> str:
        return f"bases lists {', '.join(self.spec.bases) or 'nothing'}"

    def check_bases(self) -> None:
        for os_name, image in self.spec.bases.items():
            path = ("bases", os_name)
            if os_name not in self.compat.os:
                self.fail(
                    path,
                    f"unknown base OS {os_name!r}",
                    f"known: {', '.join(sorted(self.compat.os))}",
                    key=True,
                )
            match = IMAGE_REF_RE.match(image)
            if not match:
                self.fail(path, f"{image!r} is not a valid image reference", "e.g. ubuntu:24.04")
            elif not match.group("digest"):
                self.warnings.append(
                    self.source.problem(
                        path,
                        f"base {image!r} is not pinned by digest",
                        "append @sha256:... so rebuilds use the same base",
                    )
                )

    def expand(self) -> list[Cell]:
        cells: list[Cell] = []
        seen: dict[str, Path] = {}
        for i, entry in enumerate(self.spec.releases):
            for cell, path in self.entry_cells(i, entry):
                if cell.id in seen:
                    line, col = self.source.position(seen[cell.id])
                    self.fail(
                        path,
                        f"duplicate cell {cell.id} (also made at line {line}, column {col})",
                        "each torch/CUDA/Python combination may appear once",
                    )
                    continue
                seen[cell.id] = path
                cells.append(cell)
        return cells

    def entry_cells(self, i: int, entry: Entry) -> list[tuple[Cell, Path]]:
        at: Path = ("releases", i)
        compat = self.compat
        if (why := compat.check_pair(entry.torch, None)) is not None:
            self.fail((*at, "torch"), why)
            return []
        os_name = entry.os or self.spec.defaults.os
        os_path = (*at, "os") if entry.os else ("defaults", "os")
        if entry.os and entry.os not in self.spec.bases:
            self.fail(os_path, self.unknown_os(entry.os), self.bases_hint())
            return []
        if os_name not in compat.os:
            return []  # reported under `bases`
        name = entry.name or entry.torch
        if entry.name is not None:
            self.check_name((*at, "name"), entry.name)
        pythons, py_path = self.pythons(entry, at, os_name)
        release = compat.torch[entry.torch]
        out = []
        for j, cuda_text in enumerate(entry.cuda):
            c_path = (*at, "cuda", j)
            cuda = None if cuda_text == CPU else cuda_text
            if (why := compat.check_pair(entry.torch, cuda)) is not None:
                self.fail(c_path, why)
                continue
            variant = release.variants[cuda] if cuda else None
            if variant and variant.experimental and not entry.allow_experimental:
                self.fail(
                    c_path,
                    f"torch {entry.torch} with CUDA {cuda} is experimental in PyTorch's "
                    "release matrix",
                    "set `allow_experimental: true` on this entry to build it anyway",
                )
                continue
            if entry.gpu_archs is not None:
                self.check_archs((*at, "gpu_archs"), entry, cuda)
            for k, python in enumerate(pythons):
                p_path = (*py_path, k) if py_path else (*at, "torch")
                if (why := compat.check_python(entry.torch, python)) is not None:
                    self.fail(p_path, why)
                    continue
                reasons = compat.check_os(entry.torch, os_name, python)
                for reason in reasons:
                    self.fail(os_path if "glibc" in reason else p_path, reason)
                if reasons:
                    continue
                cell_id = f"{name}-{variant_tag(cuda)}-py{python}"
                cuda_facts = compat.cuda[cuda] if cuda else None
                out.append(
                    (
                        Cell(
                            id=cell_id,
                            torch=entry.torch,
                            cuda=cuda,
                            python=python,
                            os=os_name,
                            base_image=self.spec.bases[os_name],
                            cudnn=variant.cudnn if variant else None,
                            nccl=variant.nccl if variant else None,
                            min_driver=cuda_facts.min_driver if cuda_facts else None,
                            archs=variant.archs if variant else (),
                            index_url=compat.index_url_for(cuda),
                            glibc_floor=compat.glibc_floor(entry.torch),
                            compiler_packages=cuda_facts.compiler_packages if cuda_facts else (),
                            cuda_home=cuda_facts.cuda_home if cuda_facts else None,
                            experimental=bool(variant and variant.experimental),
                            flavours=tuple(f for f in FLAVOURS if f in entry.flavours),
                        ),
                        c_path,
                    )
                )
        return out

    def pythons(self, entry: Entry, at: Path, os_name: str) -> tuple[list[str], Path | None]:
        """The Pythons of an entry: its own, the defaults', or the OS's newest in range."""
        if entry.python is not None:
            return entry.python, (*at, "python")
        if self.spec.defaults.python is not None:
            return self.spec.defaults.python, ("defaults", "python")
        rng = self.compat.torch[entry.torch].python
        usable = [p for p in self.compat.os[os_name].python if rng.contains(p)]
        if usable:
            return [max(usable, key=version_key)], None
        self.fail(
            (*at, "torch"),
            f"{os_name} provides no Python that torch {entry.torch} supports ({rng})",
            "set `python:` on this entry and an `os:` that provides it",
        )
        return [], None

    def check_name(self, path: Path, name: str) -> None:
        if ".." in name or "/" in name or "\\" in name or name.startswith("."):
            self.fail(
                path,
                f"name {name!r} would write outside the output folder",
                "use a plain name such as `stable`",
            )
        elif not set(name) <= _NAME_CHARS:
            self.fail(path, f"name {name!r} may hold only {_FIELD_HINTS['name']}")

    def check_archs(self, path: Path, entry: Entry, cuda: str | None) -> None:
        archs = tuple(entry.gpu_archs or ())
        if cuda is None:
            return
        if (why := self.compat.check_archs(cuda, archs)) is not None:
            self.fail(path, why)
            return
        built = self.compat.torch[entry.torch].variants[cuda].archs
        missing = [a for a in archs if a not in built]
        if missing:
            self.fail(
                path,
                f"torch {entry.torch} with CUDA {cuda} is not compiled for "
                f"{', '.join(missing)}; it covers {', '.join(built)}",
            )

    def check_leave_out(self) -> None:
        flavours = self.spec.flavours
        if flavours.full.leave_out:
            self.fail(
                ("flavours", "full", "leave_out"),
                "leave_out applies to the slim flavour only",
                "move it under flavours.slim; full installs what slim leaves out",
            )
        for i, name in enumerate(flavours.slim.leave_out):
            if name.lower().replace("_", "-") == "torch":
                self.fail(
                    ("flavours", "slim", "leave_out", i),
                    "torch cannot be left out of a PyTorch image",
                    "leave out only what torch can run without (e.g. triton)",
                )

    def plan(self, cells: list[Cell]) -> list[ImagePlan]:
        spec = self.spec
        plans = []
        excluded_by: dict[int, int] = {}
        for cell in cells:
            for flavour in cell.flavours:
                hit = self.exclusion_for(cell, flavour)
                if hit is not None:
                    excluded_by[hit] = excluded_by.get(hit, 0) + 1
                    continue
                fspec = getattr(spec.flavours, flavour)
                tag = cell.versioned_tag(flavour, spec.tag_prefix)
                if (why := tag_problem(tag)) is not None:
                    path: Path = ("tag_prefix",) if spec.tag_prefix else ("releases",)
                    self.fail(path, why, "tags may hold a-z, 0-9, '.', '_' and '-' only")
                    continue
                plans.append(
                    ImagePlan(
                        cell=cell,
                        flavour=flavour,
                        repository=spec.repository,
                        tag=tag,
                        aliases=(),
                        size_budget_bytes=fspec.size_budget_bytes,
                        packages=tuple(fspec.packages),
                        required_probes=tuple(fspec.required_probes),
                        # full reinstalls what its slim left out, so both carry the list.
                        leave_out=tuple(spec.flavours.slim.leave_out),
                        user_name=spec.user.name,
                        uid=spec.user.uid,
                        gid=spec.user.gid,
                        source=spec.source,
                    )
                )
        for i, _ in enumerate(spec.exclude):
            if i not in excluded_by:
                self.fail(
                    ("exclude", i),
                    "this exclusion matches no image",
                    "remove it, or fix its torch/cuda/python/flavour",
                )
        if cells and not plans and not self.problems:
            self.fail(("releases",), "every image is excluded; nothing would be built")
        return self.with_aliases(plans)

    def exclusion_for(self, cell: Cell, flavour: str) -> int | None:
        for i, ex in enumerate(self.spec.exclude):
            if _selects(ex, cell) and ex.flavour in (None, flavour):
                return i
        return None

    def with_aliases(self, plans: list[ImagePlan]) -> list[ImagePlan]:
        """Give each floating alias to the plan with the newest Python of its group."""
        prefix = self.spec.tag_prefix
        owner: dict[str, ImagePlan] = {}
        for plan in plans:
            alias = plan.cell.alias_tag(plan.flavour, prefix)
            best = owner.get(alias)
            if best is None or version_key(plan.cell.python) > version_key(best.cell.python):
                owner[alias] = plan
        latest = self.latest_cell(plans)
        # The flavours actually planned: an exclusion may drop the latest cell's
        # `full`, and then `latest` must go to its slim image, not to nobody.
        latest_flavours = {p.flavour for p in plans if p.cell == latest}
        out = []
        for plan in plans:
            aliases = [a for a, p in owner.items() if p is plan]
            if latest is not None and plan.cell == latest:
                aliases.append(f"{prefix}latest-{plan.flavour}")
                if plan.flavour == "full" or "full" not in latest_flavours:
                    aliases.append(f"{prefix}latest")
            out.append(replace(plan, aliases=tuple(aliases)))
        return out

    def latest_cell(self, plans: list[ImagePlan]) -> Cell | None:
        cells = {p.cell for p in plans}
        found = [c for c in cells if _selects(self.spec.latest, c)]
        return found[0] if len(found) == 1 else None

    def pick_latest(self, cells: list[Cell]) -> Cell | None:
        found = [c for c in cells if _selects(self.spec.latest, c)]
        if len(found) == 1:
            return found[0]
        sel = self.spec.latest
        if not found:
            self.fail(
                ("latest",),
                f"latest (torch {sel.torch}, cuda {sel.cuda}) matches no cell",
                f"cells: {', '.join(c.id for c in cells) or 'none'}",
            )
        else:
            self.fail(
                ("latest",),
                f"latest matches {len(found)} cells ({', '.join(c.id for c in found)})",
                "add `python:` to pick one",
            )
        return None


def _selects(selector: Selector, cell: Cell) -> bool:
    cuda = CPU if cell.cuda is None else cell.cuda
    return (
        selector.torch in (None, cell.torch)
        and selector.cuda in (None, cuda)
        and selector.python in (None, cell.python)
    )
