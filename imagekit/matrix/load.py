"""Load matrix.yaml, check it against the compatibility data, and expand it into image plans.

`load_matrix` is the boundary: text goes in, a frozen `Matrix` or one
`ValidationError` listing every problem with its `file:line:col` comes out.
Nothing here touches Docker.

The steps, in order, each with one job; all but the first report into one `_Report`:
1. shape: pydantic's errors as located problems (`_shape_problems`);
2. file-wide settings against the compatibility data (`_check_settings`);
3. each release entry against the compatibility data (`_EntryCheck`), and its
   approved combinations expanded into cells (`_expand`);
4. cells into image plans, minus exclusions (`_Planner`), tagged by `_Tags.versioned`;
5. the one `latest` cell (`_pick_latest`);
6. aliases, including `latest`, given to the plans (`_Tags.with_aliases`).
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any

import pydantic
from packaging.requirements import InvalidRequirement, Requirement

from imagekit.errors import InputError, Problem, ValidationError
from imagekit.kernel.vocabulary import AMD64
from imagekit.matrix.compat import CPU, CompatData, load_compat, variant_tag, version_key
from imagekit.matrix.plan import (
    FLAVOURS,
    IMAGE_REF_RE,
    Cell,
    ImagePlan,
    matches,
    platform_suffix,
    repository_problem,
    tag_problem,
)
from imagekit.matrix.schema import Entry, MatrixFile, Selector
from imagekit.matrix.yamlsrc import Path, Scalar, SourceMap, load_yaml

if TYPE_CHECKING:  # pydantic's own type of one error; only annotations use it
    from pydantic_core import ErrorDetails

_FIELD_HINTS = {
    "torch": 'a torch release like "2.8.0"',
    "cuda": 'a CUDA version like "12.8", or "cpu"',
    "python": 'a Python version like "3.12"',
    "gpu_archs": 'a GPU architecture like "sm_90"',
    "name": "lowercase letters, digits, '.', '_' and '-'",
    "leave_out": 'a distribution name like "triton"',
    "platforms": "a Docker platform: linux/amd64 or linux/arm64",
}
# What to do about a value that does not match its field's pattern, where there is more
# to say than what the value should look like.
_FIELD_FIXES = {
    "leave_out": "name the distribution only (e.g. triton): no version, option, URL or path",
}
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789._-")

# A matrix is a few KB; anything near this is the wrong file (a log, an image, a dump).
# The file is refused before it is parsed, without reading more than this.
MAX_MATRIX_BYTES = 1 << 20
# A distribution name as PEP 508 spells it.
_DIST_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
# What pip's requirements-file reader treats as a file to install, not as a name.
_ARCHIVE_SUFFIXES = (
    ".whl",
    ".zip",
    ".tar",
    ".tar.gz",
    ".tgz",
    ".tar.bz2",
    ".tbz",
    ".tar.xz",
    ".txz",
    ".tar.lz",
    ".tlz",
)
_PACKAGE_HINT = (
    "write NAME==VERSION; pass indexes with --pip-index-url/--extra-index-url, "
    "wheels with --wheelhouse"
)


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
        platform: str | None = None,
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
        raise ValidationError([*source.problems, *_shape_problems(exc, source)]) from None
    if source.problems:
        raise ValidationError(source.problems)
    return _check_and_expand(spec, source, compat or load_compat(), file)


# Step 1, shape: pydantic errors as located problems ------------------------------


def _shape_problems(exc: pydantic.ValidationError, source: SourceMap) -> list[Problem]:
    """One located `Problem` per pydantic error, in pydantic's order.

    Errors at a path the YAML loader already reported (a poisoned path) are dropped;
    each other error is placed at its key or value in the document.
    """
    problems = []
    for error in exc.errors():
        if _other_union_member(error["loc"], source):
            continue
        loc = _document_path(error["loc"], source)
        if error["loc"][-1:] == ("[key]",):
            problems.append(_key_problem(error, loc, source))
        elif not source.is_poisoned(loc):
            problems.append(_shape_problem(error, loc, source))
    return problems


# pydantic's names for the members of a union (`bases` values: a string, or a mapping of
# platform to string) as they appear in an error's location.
_STRING_MEMBERS = ("str", "constrained-str")


def _other_union_member(loc: tuple[str | int, ...], source: SourceMap) -> bool:
    """Whether an error belongs to the union member that does not fit what the document holds
    there (its string member, where the document has a mapping; its mapping member, where it
    has a scalar): only the member of the document's own kind has something to say."""
    for i, part in enumerate(loc):
        if not isinstance(part, str):
            continue
        at = tuple(loc[:i])
        if part in _STRING_MEMBERS and at in source.values and at not in source.scalars:
            return True
        if part.startswith("dict[") and at in source.scalars:
            return True
    return False


def _key_problem(error: ErrorDetails, loc: Path, source: SourceMap) -> Problem:
    """A mapping key of the wrong form (a platform under `bases.OS`), placed at the key."""
    field = "platforms" if loc[:1] == ("bases",) else str(loc[-2] if len(loc) > 1 else "")
    expected = _FIELD_HINTS.get(field, "a valid key")
    return source.problem(loc, f"{loc[-1]!r} is not {expected}", key=True)


def _shape_problem(error: ErrorDetails, loc: Path, source: SourceMap) -> Problem:
    """The problem a person is shown for one pydantic `error` at document path `loc`."""
    field = next((p for p in reversed(loc) if isinstance(p, str)), "")
    kind = error["type"]
    if kind == "extra_forbidden":
        return _unknown_key(loc, source)
    if kind == "missing":
        parent = ".".join(str(p) for p in loc[:-1]) or "the matrix"
        return source.problem(loc[:-1], f"missing required key {loc[-1]!r} in {parent}")
    if kind == "string_type" and (scalar := _typed_scalar(source, loc)) is not None:
        return _not_text(error, loc, field, scalar, source)
    if kind == "string_pattern_mismatch":
        expected = _FIELD_HINTS.get(field, f"text matching {error['ctx']['pattern']}")
        return source.problem(
            loc, f"{field}: {error['input']!r} is not {expected}", _FIELD_FIXES.get(field, "")
        )
    if kind == "literal_error" and field == "schema_version":
        return source.problem(
            loc,
            f"schema_version {error['input']!r} is not supported; this imagekit reads 1",
        )
    where = ".".join(str(p) for p in loc) or "matrix"
    return source.problem(loc, f"{where}: {error['msg']}")


def _unknown_key(loc: Path, source: SourceMap) -> Problem:
    """An unknown key, placed at the key, with the closest known key and all of them."""
    model = _model_at(loc[:-1])
    known = list(model.model_fields) if model else []
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else ""
    if known:
        hint = (hint + " " if hint else "") + f"known keys: {', '.join(known)}"
    return source.problem(loc, f"unknown key {loc[-1]!r}", hint, key=True)


def _not_text(
    error: ErrorDetails, loc: Path, field: str, scalar: Scalar, source: SourceMap
) -> Problem:
    """A value YAML read as something other than text: say what it read, and how to fix it."""
    if scalar.kind == "null":
        # An empty value, `~` or `null`: "quote it" would not help there.
        expected = _FIELD_HINTS.get(field, "some text")
        return source.problem(loc, f"{field}: no value given", f"write {expected}")
    value = error["input"]
    shown = "false" if value is False else "true" if value is True else repr(value)
    noun = "boolean" if scalar.kind == "bool" else scalar.kind
    noun = "number" if noun in ("int", "float") else noun
    return source.problem(
        loc,
        f"{field}: YAML read {scalar.text} as the {noun} {shown}, not as text",
        f'quote it: "{scalar.text}"',
    )


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


# Steps 2-6, meaning: a well-shaped matrix into a Matrix -----------------------------


class _Report:
    """The located problems and warnings the steps find, in the order they find them.

    Any problem makes the matrix invalid; warnings travel with a valid one.
    """

    def __init__(self, source: SourceMap) -> None:
        self.source = source
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []

    def fail(self, path: Path, message: str, hint: str = "", *, key: bool = False) -> None:
        self.problems.append(self.source.problem(path, message, hint, key=key))

    def warn(self, path: Path, message: str, hint: str = "") -> None:
        self.warnings.append(self.source.problem(path, message, hint))


def _check_and_expand(spec: MatrixFile, source: SourceMap, compat: CompatData, file: str) -> Matrix:
    """Run steps 2-6 on a well-shaped matrix, in order, sharing one `_Report`.

    Returns the `Matrix`, or raises `ValidationError` with every problem found.
    """
    report = _Report(source)
    _check_settings(spec, compat, report)
    cells = _expand(spec, compat, report)
    tags = _Tags(spec.tag_prefix, report)
    plans = _Planner(spec, tags, report).plans(cells)
    latest = _pick_latest(spec, cells, report)
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


# Step 2, the file's settings against the compatibility data ------------------------


def _check_settings(spec: MatrixFile, compat: CompatData, report: _Report) -> None:
    """Report what is wrong with the file-wide settings: `repository`, `bases`,
    `defaults.os`, the flavours' `packages` and `leave_out`, in that order.

    An unpinned base is a warning, not a problem. Releases are checked in step 3.
    """
    if problem := repository_problem(spec.repository):
        report.fail(("repository",), problem, "e.g. ghcr.io/acme/pytorch")
    _check_bases(spec, compat, report)
    if spec.defaults.os not in spec.bases:
        report.fail(("defaults", "os"), _unknown_os(spec.defaults.os), _bases_hint(spec))
    _check_packages(spec, report)
    _check_leave_out(spec, report)
    _check_compile(spec, report)


def _check_bases(spec: MatrixFile, compat: CompatData, report: _Report) -> None:
    """Each base: an OS the compatibility data knows, and a valid, ideally pinned, image."""
    for os_name, images in spec.bases.items():
        path: Path = ("bases", os_name)
        if os_name not in compat.os:
            report.fail(
                path,
                f"unknown base OS {os_name!r}",
                f"known: {', '.join(sorted(compat.os))}",
                key=True,
            )
        per_platform = images.items() if isinstance(images, dict) else [(None, images)]
        for platform, image in per_platform:
            at = path if platform is None else (*path, platform)
            match = IMAGE_REF_RE.match(image)
            if not match:
                report.fail(at, f"{image!r} is not a valid image reference", "e.g. ubuntu:24.04")
            elif not match.group("digest"):
                report.warn(
                    at,
                    f"base {image!r} is not pinned by digest",
                    "append @sha256:... so rebuilds use the same base",
                )


def package_problem(text: str) -> str | None:
    """Why `text` is not a requirement specifier pip may read from a requirements file
    (None: it is one).

    A requirements file obeys options (`--index-url`, `-f`, `-r`, `-e`, ...) and installs
    URLs, paths and direct references (`name @ URL`) as they are: any of those would
    bypass `--wheelhouse` and `--pip-index-url`. Only a PEP 508 name with extras,
    version specifiers and markers is accepted.
    """
    if text.lstrip().startswith("-"):
        return "is a pip option, not a requirement: pip would obey it"
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        if "://" in text or text.lstrip().startswith(("/", ".", "~", "\\")):
            return "is a URL or a path, not a requirement: pip would install it as it is"
        reason = str(exc).splitlines()[0] if str(exc) else "invalid"
        return f"is not a requirement (PEP 508): {reason}"
    if requirement.url is not None:
        return "is a direct reference (NAME @ URL): pip would install it from that URL"
    if requirement.name.lower().endswith(_ARCHIVE_SUFFIXES):
        return "looks like a file name: pip would install it as a path"
    return None


def _check_packages(spec: MatrixFile, report: _Report) -> None:
    """Each flavour's `packages` entry is a requirement specifier, nothing pip would obey
    or fetch as it is (see `package_problem`)."""
    for flavour in FLAVOURS:
        for i, text in enumerate(getattr(spec.flavours, flavour).packages):
            if (why := package_problem(text)) is not None:
                report.fail(
                    ("flavours", flavour, "packages", i), f"package {text!r} {why}", _PACKAGE_HINT
                )


def _check_leave_out(spec: MatrixFile, report: _Report) -> None:
    """`leave_out` belongs to slim only, names distributions, and may not name torch."""
    flavours = spec.flavours
    if flavours.full.leave_out:
        report.fail(
            ("flavours", "full", "leave_out"),
            "leave_out applies to the slim flavour only",
            "move it under flavours.slim; full installs what slim leaves out",
        )
    for i, name in enumerate(flavours.slim.leave_out):
        if not _DIST_NAME.match(name):
            # The schema's pattern lets a trailing '.', '_' or '-' through.
            report.fail(
                ("flavours", "slim", "leave_out", i),
                f"leave_out: {name!r} is not {_FIELD_HINTS['leave_out']}",
                _FIELD_FIXES["leave_out"],
            )
        elif name.lower().replace("_", "-") == "torch":
            report.fail(
                ("flavours", "slim", "leave_out", i),
                "torch cannot be left out of a PyTorch image",
                "leave out only what torch can run without (e.g. triton)",
            )


def _check_compile(spec: MatrixFile, report: _Report) -> None:
    """`compile: false` belongs to slim (full carries compilers), a slim that promises
    torch.compile keeps triton, which inductor needs on the GPU, and one that does not
    cannot require the compile probe and still be published."""
    flavours = spec.flavours
    if not flavours.full.compile:
        report.fail(
            ("flavours", "full", "compile"),
            "compile: false applies to the slim flavour only: full carries the compilers",
            "remove it from flavours.full",
        )
    if not flavours.slim.compile and "compile" in flavours.slim.required_probes:
        # A warning: such a matrix builds and verifies, but publish refuses every slim.
        report.warn(
            ("flavours", "slim", "required_probes"),
            "slim requires the compile probe, which a compile: false slim skips: publish "
            "will refuse every slim",
            "drop compile from flavours.slim.required_probes, or remove compile: false",
        )
    left_out = {name.lower().replace("_", "-") for name in flavours.slim.leave_out}
    if flavours.slim.compile and "triton" in left_out:
        report.fail(
            ("flavours", "slim", "leave_out"),
            "slim promises torch.compile (compile defaults to true) but leaves triton out: "
            "inductor needs triton on the GPU",
            "keep triton in slim, or set compile: false under flavours.slim",
        )


def _unknown_os(name: str) -> str:
    return f"base OS {name!r} has no entry under `bases`"


def _bases_hint(spec: MatrixFile) -> str:
    return f"bases lists {', '.join(spec.bases) or 'nothing'}"


# Step 3, each release entry against the compatibility data -------------------------


@dataclass(frozen=True)
class _Combo:
    """One torch/CUDA/Python/OS combination of an entry that passed every check.

    `path` is its `cuda` item in the document, where a duplicate of it is reported.
    """

    entry: Entry
    name: str
    os: str
    cuda: str | None
    python: str
    path: Path
    platform: str = AMD64


class _EntryCheck:
    """Checks one release entry against the compatibility data.

    `approve` reports every problem of the entry and returns the combinations that
    have none, in document order (cuda items, then Pythons). It builds no cells.
    """

    def __init__(self, spec: MatrixFile, compat: CompatData, report: _Report) -> None:
        self.spec = spec
        self.compat = compat
        self.report = report

    def approve(self, i: int, entry: Entry) -> list[_Combo]:
        at: Path = ("releases", i)
        if (why := self.compat.check_pair(entry.torch, None)) is not None:
            self.report.fail((*at, "torch"), why)
            return []
        os_name = entry.os or self.spec.defaults.os
        os_path = (*at, "os") if entry.os else ("defaults", "os")
        if entry.os and entry.os not in self.spec.bases:
            self.report.fail(os_path, _unknown_os(entry.os), _bases_hint(self.spec))
            return []
        if os_name not in self.compat.os or os_name not in self.spec.bases:
            return []  # reported under `bases` or at `defaults.os`
        if entry.name is not None:
            self.check_name((*at, "name"), entry.name)
        name = entry.name or entry.torch
        pythons, py_path = self.pythons(entry, at, os_name)
        platforms = self.platforms(entry, at, os_name)
        out = []
        for j, cuda_text in enumerate(entry.cuda):
            c_path = (*at, "cuda", j)
            cuda = None if cuda_text == CPU else cuda_text
            if not self.cuda_ok(entry, cuda, c_path, at):
                continue
            usable = [p for p, p_at in platforms if self.platform_ok(entry, cuda, p, p_at)]
            for k, python in enumerate(pythons):
                p_path = (*py_path, k) if py_path else (*at, "torch")
                if self.python_ok(entry, python, os_name, os_path, p_path):
                    out += [
                        _Combo(entry, name, os_name, cuda, python, c_path, platform)
                        for platform in usable
                    ]
        return out

    def platforms(self, entry: Entry, at: Path, os_name: str) -> list[tuple[str, Path]]:
        """The entry's platforms (its own, or the defaults'), each with where it is written;
        a platform named twice, or one its OS has no base image for, is reported and dropped."""
        if entry.platforms is not None:
            listed, where = entry.platforms, (*at, "platforms")
        else:
            listed, where = self.spec.defaults.platforms, ("defaults", "platforms")
        bases = self.spec.bases[os_name]
        out: list[tuple[str, Path]] = []
        for i, platform in enumerate(listed):
            p_at: Path = (*where, i)
            if platform in (p for p, _ in out):
                self.report.fail(p_at, f"platform {platform} is listed twice")
            elif isinstance(bases, dict) and platform not in bases:
                self.report.fail(
                    p_at,
                    f"bases.{os_name} names no image for {platform}",
                    f"add `{platform}: IMAGE` under bases.{os_name} "
                    "(`imagekit base bootstrap --arch ARCH` makes a Debian one), "
                    "or give one multi-platform image for every platform",
                )
            else:
                out.append((platform, p_at))
        return out

    def platform_ok(self, entry: Entry, cuda: str | None, platform: str, at: Path) -> bool:
        """Whether this torch/CUDA build has wheels for `platform` (reported where the
        platform is written when not); also checks `gpu_archs` against those wheels."""
        if (why := self.compat.check_platform(entry.torch, cuda, platform)) is not None:
            self.report.fail(
                at, why, "build this platform for a variant that has its wheels, or drop it"
            )
            return False
        return True

    def cuda_ok(self, entry: Entry, cuda: str | None, c_path: Path, at: Path) -> bool:
        """Whether torch ships `cuda` (not experimentally, unless allowed); also checks
        the entry's `gpu_archs` against that build."""
        if (why := self.compat.check_pair(entry.torch, cuda)) is not None:
            self.report.fail(c_path, why)
            return False
        variant = self.compat.torch[entry.torch].variants[cuda] if cuda else None
        if variant and variant.experimental and not entry.allow_experimental:
            self.report.fail(
                c_path,
                f"torch {entry.torch} with CUDA {cuda} is experimental in PyTorch's release matrix",
                "set `allow_experimental: true` on this entry to build it anyway",
            )
            return False
        if entry.gpu_archs is not None:
            self.check_archs((*at, "gpu_archs"), entry, cuda)
        return True

    def python_ok(
        self, entry: Entry, python: str, os_name: str, os_path: Path, p_path: Path
    ) -> bool:
        """Whether torch has wheels for `python` and the OS can run them."""
        if (why := self.compat.check_python(entry.torch, python)) is not None:
            self.report.fail(p_path, why)
            return False
        reasons = self.compat.check_os(entry.torch, os_name, python)
        for reason in reasons:
            self.report.fail(os_path if "glibc" in reason else p_path, reason)
        return not reasons

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
        self.report.fail(
            (*at, "torch"),
            f"{os_name} provides no Python that torch {entry.torch} supports ({rng})",
            "set `python:` on this entry and an `os:` that provides it",
        )
        return [], None

    def check_name(self, path: Path, name: str) -> None:
        if ".." in name or "/" in name or "\\" in name or name.startswith("."):
            self.report.fail(
                path,
                f"name {name!r} would write outside the output folder",
                "use a plain name such as `stable`",
            )
        elif not set(name) <= _NAME_CHARS:
            self.report.fail(path, f"name {name!r} may hold only {_FIELD_HINTS['name']}")

    def check_archs(self, path: Path, entry: Entry, cuda: str | None) -> None:
        """`gpu_archs` against the wheels of every platform of the entry that has them."""
        archs = tuple(entry.gpu_archs or ())
        if cuda is None:
            return
        if (why := self.compat.check_archs(cuda, archs)) is not None:
            self.report.fail(path, why)
            return
        listed = entry.platforms or self.spec.defaults.platforms
        for platform in dict.fromkeys(listed):
            if self.compat.check_platform(entry.torch, cuda, platform) is not None:
                continue  # reported at the platform
            built = self.compat.archs_for(entry.torch, cuda, platform)
            missing = [a for a in archs if a not in built]
            if missing:
                on = f" ({platform})" if platform != AMD64 else ""
                self.report.fail(
                    path,
                    f"torch {entry.torch} with CUDA {cuda}{on} is not compiled for "
                    f"{', '.join(missing)}; it covers {', '.join(built)}",
                )


# Step 3, expansion: approved combinations into cells -------------------------------


def _expand(spec: MatrixFile, compat: CompatData, report: _Report) -> list[Cell]:
    """The cells of all release entries, in document order.

    Entry by entry: `_EntryCheck.approve` reports the entry's problems, then its
    combinations become cells. A cell id made twice is reported at the later `cuda`
    item (naming where the first was made) and dropped.
    """
    check = _EntryCheck(spec, compat, report)
    cells: list[Cell] = []
    seen: dict[str, Path] = {}
    for i, entry in enumerate(spec.releases):
        for combo in check.approve(i, entry):
            cell = _make_cell(combo, spec, compat)
            if cell.id in seen:
                if cell.platform != AMD64 and cell.shared_id in seen:
                    continue  # this combination's duplicate is reported once, not per platform
                line, col = report.source.position(seen[cell.id])
                report.fail(
                    combo.path,
                    f"duplicate cell {cell.id} (also made at line {line}, column {col})",
                    "each torch/CUDA/Python combination may appear once",
                )
                continue
            seen[cell.id] = combo.path
            cells.append(cell)
    return cells


def _make_cell(combo: _Combo, spec: MatrixFile, compat: CompatData) -> Cell:
    """The cell of an approved combination, with its facts from the compatibility data."""
    entry, cuda, platform = combo.entry, combo.cuda, combo.platform
    variant = compat.torch[entry.torch].variants[cuda] if cuda else None
    cuda_facts = compat.cuda[cuda] if cuda else None
    bases = spec.bases[combo.os]
    return Cell(
        id=f"{combo.name}-{variant_tag(cuda)}-py{combo.python}{platform_suffix(platform)}",
        torch=entry.torch,
        cuda=cuda,
        python=combo.python,
        os=combo.os,
        base_image=bases[platform] if isinstance(bases, dict) else bases,
        cudnn=variant.cudnn if variant else None,
        nccl=variant.nccl if variant else None,
        min_driver=cuda_facts.min_driver if cuda_facts else None,
        archs=compat.archs_for(entry.torch, cuda, platform) if cuda else (),
        index_url=compat.index_url_on(cuda, platform, entry.torch),
        glibc_floor=compat.glibc_floor(entry.torch),
        compiler_packages=cuda_facts.compiler_packages if cuda_facts else (),
        cuda_home=cuda_facts.cuda_home if cuda_facts else None,
        experimental=bool(variant and variant.experimental),
        flavours=tuple(f for f in FLAVOURS if f in entry.flavours),
        platform=platform,
    )


# Step 4, images: cells in flavours, minus exclusions -------------------------------


class _Planner:
    """Turns cells into image plans (without aliases; step 6 adds those).

    One plan per cell and flavour, in cell then `FLAVOURS` order, unless an
    exclusion takes it or its tag is invalid. Reports exclusions that match no
    image, and a matrix whose every image is excluded.
    """

    def __init__(self, spec: MatrixFile, tags: _Tags, report: _Report) -> None:
        self.spec = spec
        self.tags = tags
        self.report = report

    def plans(self, cells: list[Cell]) -> list[ImagePlan]:
        plans = []
        used: set[int] = set()
        for cell in cells:
            for flavour in cell.flavours:
                hit = self.exclusion_for(cell, flavour)
                if hit is not None:
                    used.add(hit)
                    continue
                tag = self.tags.versioned(cell, flavour)
                if tag is not None:
                    plans.append(self.plan(cell, flavour, tag))
        for i, _ in enumerate(self.spec.exclude):
            if i not in used:
                self.report.fail(
                    ("exclude", i),
                    "this exclusion matches no image",
                    "remove it, or fix its torch/cuda/python/flavour",
                )
        if cells and not plans and not self.report.problems:
            self.report.fail(("releases",), "every image is excluded; nothing would be built")
        return plans

    def exclusion_for(self, cell: Cell, flavour: str) -> int | None:
        """The index of the first exclusion that takes `cell` in `flavour`, if any."""
        for i, ex in enumerate(self.spec.exclude):
            if _selects(ex, cell) and ex.flavour in (None, flavour):
                return i
        return None

    def plan(self, cell: Cell, flavour: str, tag: str) -> ImagePlan:
        spec = self.spec
        fspec = getattr(spec.flavours, flavour)
        return ImagePlan(
            cell=cell,
            flavour=flavour,
            repository=spec.repository,
            tag=tag,
            aliases=(),
            size_budget_bytes=fspec.size_budget_bytes,
            packages=tuple(fspec.packages),
            required_probes=tuple(fspec.required_probes),
            nodes=fspec.nodes,
            rdma=fspec.rdma,
            compile=fspec.compile,
            # full reinstalls what its slim left out, so both carry the list.
            leave_out=tuple(spec.flavours.slim.leave_out),
            user_name=spec.user.name,
            uid=spec.user.uid,
            gid=spec.user.gid,
            source=spec.source,
        )


# Step 5, the latest cell ------------------------------------------------------------


def _pick_latest(spec: MatrixFile, cells: list[Cell], report: _Report) -> Cell | None:
    """The one cell `latest:` selects; None, reported, when it selects none or several.

    This is the only place `latest` is decided; step 6 gives its aliases to this cell.
    """
    # One image may be several cells, one per platform: the first stands for them all.
    found: list[Cell] = []
    for cell in cells:
        if _selects(spec.latest, cell) and all(c.shared_id != cell.shared_id for c in found):
            found.append(cell)
    if len(found) == 1:
        return found[0]
    sel = spec.latest
    if not found:
        report.fail(
            ("latest",),
            f"latest (torch {sel.torch}, cuda {sel.cuda}) matches no cell",
            f"cells: {', '.join(c.id for c in cells) or 'none'}",
        )
    else:
        report.fail(
            ("latest",),
            f"latest matches {len(found)} cells ({', '.join(c.id for c in found)})",
            "add `python:` to pick one",
        )
    return None


# Steps 4 and 6, tags and aliases ---------------------------------------------------


class _Tags:
    """Every tag and alias an image gets, each decided once.

    `versioned` gives the immutable tag of a cell in a flavour (None, reported, when
    Docker would refuse it). `with_aliases` gives each floating alias to the plan with
    the newest Python of its group, `latest-{flavour}` to each image of the latest
    cell, and `latest` to its full image, or, when full is not built, to its others.
    """

    def __init__(self, prefix: str, report: _Report) -> None:
        self.prefix = prefix
        self.report = report

    def versioned(self, cell: Cell, flavour: str) -> str | None:
        tag = cell.versioned_tag(flavour, self.prefix)
        # The engine holds each platform's image under the tag plus its suffix: that too
        # must be a valid tag.
        if (why := tag_problem(tag + platform_suffix(cell.platform))) is not None:
            path: Path = ("tag_prefix",) if self.prefix else ("releases",)
            hint = (
                "shorten tag_prefix (a linux/arm64 image's local tag adds -arm64)"
                if "characters long" in why
                else "tags may hold a-z, 0-9, '.', '_' and '-' only"
            )
            self.report.fail(path, why, hint)
            return None
        return tag

    def with_aliases(self, plans: list[ImagePlan], latest: Cell) -> list[ImagePlan]:
        """`plans` with their aliases: owned floating ones, then `latest-*`, then `latest`."""
        owner = self.floating_owners(plans)
        latest_plans = [p for p in plans if p.cell.shared_id == latest.shared_id]
        # An exclusion may drop the latest cell's `full`; `latest` then goes to its
        # other images, not to nobody.
        latest_owners = [p for p in latest_plans if p.flavour == "full"] or latest_plans
        out = []
        for plan in plans:
            aliases = [a for a, p in owner.items() if _owns(p, plan)]
            if any(plan is p for p in latest_plans):
                aliases.append(f"{self.prefix}latest-{plan.flavour}")
            if any(plan is p for p in latest_owners):
                aliases.append(f"{self.prefix}latest")
            out.append(replace(plan, aliases=tuple(aliases)))
        return out

    def floating_owners(self, plans: list[ImagePlan]) -> dict[str, ImagePlan]:
        """Each floating alias and the plan with the newest Python of its group (the
        first such plan on a tie). The alias goes to every platform of the owner's image
        (`owns`): one index, never platforms of different Pythons."""
        owner: dict[str, ImagePlan] = {}
        for plan in plans:
            alias = plan.cell.alias_tag(plan.flavour, self.prefix)
            best = owner.get(alias)
            if best is None or version_key(plan.cell.python) > version_key(best.cell.python):
                owner[alias] = plan
        return owner


def _owns(owner: ImagePlan, plan: ImagePlan) -> bool:
    """Whether `plan` is a platform of the image `owner` is (the same cell and flavour)."""
    return owner.cell.shared_id == plan.cell.shared_id and owner.flavour == plan.flavour


def _selects(selector: Selector, cell: Cell) -> bool:
    cuda = CPU if cell.cuda is None else cell.cuda
    return (
        selector.torch in (None, cell.torch)
        and selector.cuda in (None, cuda)
        and selector.python in (None, cell.python)
    )
