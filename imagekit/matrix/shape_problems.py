"""Step 1 of loading a matrix: pydantic's shape errors as problems located in the document.

pydantic knows a value's place as a path through the parsed data, mixed with the names of union
members; `shape_problems` turns each error into one `Problem` at its key or value in the YAML
(`SourceMap`), in words a person can act on (`FIELD_HINTS`: what a field's value looks like).
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

import pydantic

from imagekit.errors import Problem
from imagekit.matrix.schema import MatrixFile
from imagekit.matrix.yamlsrc import Path, Scalar, SourceMap

if TYPE_CHECKING:  # pydantic's own type of one error; only annotations use it
    from pydantic_core import ErrorDetails

FIELD_HINTS = {
    "torch": 'a torch release like "2.8.0"',
    "cuda": 'a CUDA version like "12.8", or "cpu"',
    "python": 'a Python version like "3.12"',
    "gpu_archs": 'a GPU architecture like "sm_90"',
    "name": "lowercase letters, digits, '.', '_' and '-'",
    "leave_out": 'a distribution name like "triton"',
    "platforms": "a Docker platform: linux/amd64 or linux/arm64",
    "end_of_patch": "a date like 2027-06-30 (YYYY-MM-DD)",
}
# What to do about a value that does not match its field's pattern, where there is more
# to say than what the value should look like.
FIELD_FIXES = {
    "leave_out": "name the distribution only (e.g. triton): no version, option, URL or path",
}


def shape_problems(exc: pydantic.ValidationError, source: SourceMap) -> list[Problem]:
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
    expected = FIELD_HINTS.get(field, "a valid key")
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
        expected = FIELD_HINTS.get(field, f"text matching {error['ctx']['pattern']}")
        return source.problem(
            loc, f"{field}: {error['input']!r} is not {expected}", FIELD_FIXES.get(field, "")
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
        expected = FIELD_HINTS.get(field, "some text")
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
    model: type[pydantic.BaseModel] = MatrixFile
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
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
    return model


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
