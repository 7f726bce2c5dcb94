"""Whatever text comes in, `parse_matrix` returns a `Matrix` or raises `ValidationError`.

Any other exception is a bug: the CLI shows it as a traceback instead of a
located message. The inputs are (a) random text, (b) random YAML documents and
(c) the valid base documents with random values put in place of their strings.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from imagekit.errors import ValidationError
from imagekit.matrix.load import Matrix, parse_matrix
from imagekit.matrix.plan import tag_problem
from imagekit.matrix.schema import (
    Defaults,
    Entry,
    Exclusion,
    Flavours,
    FlavourSpec,
    Latest,
    MatrixFile,
    UserSpec,
)

FILE = "fuzz.yaml"
ROOT = Path(__file__).resolve().parents[3]

# The same small valid matrix as BASE in test_matrix_validation.py, and the
# project's own matrix.yaml (which has exclusions, names, several OSes).
SMALL = """\
schema_version: 1
repository: ghcr.io/acme/pytorch
bases:
  ubuntu-24.04: "ubuntu:24.04"
defaults:
  os: ubuntu-24.04
  python: "3.12"
flavours:
  slim:
    size_budget_bytes: 8000000000
  full:
    size_budget_bytes: 11000000000
latest:
  torch: "2.14.1"
  cuda: "13.0"
releases:
  - torch: "2.14.1"
    cuda: ["13.0"]
"""
DEFAULT = (ROOT / "matrix.yaml").read_text(encoding="utf-8")
BASES = {"small": SMALL, "default": DEFAULT}

FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

# What PyYAML counts as a line break, to bound the lines a problem may point at.
_LINE_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")


def check_outcome(text: str) -> Matrix | ValidationError:
    """Parse `text`; fail on any outcome but a sound Matrix or a located ValidationError."""
    try:
        matrix = parse_matrix(text, FILE)
    except ValidationError as exc:
        assert exc.problems
        last_line = len(_LINE_BREAK.findall(text)) + 2  # the stream end may follow a break
        for problem in exc.problems:
            assert problem.file == FILE
            assert 1 <= problem.line <= last_line, problem
            assert problem.col >= 1, problem
            assert problem.message.strip(), problem
        assert exc.format()
        event("rejected")
        return exc
    assert isinstance(matrix, Matrix)
    assert matrix.cells and matrix.plans
    assert matrix.latest in matrix.cells
    for plan in matrix.plans:
        assert tag_problem(plan.tag) is None, plan.tag
    event("accepted")
    return matrix


def test_base_documents_are_valid() -> None:
    for text in BASES.values():
        assert isinstance(parse_matrix(text, FILE), Matrix)


# (a) Random text ---------------------------------------------------------------------------

# Characters that mean something to YAML, so that random text gets past the first token.
_YAML_ALPHABET = st.sampled_from(
    list(":-[]{}\"'#&*!|>%@`,?~ \t\n\r") + list("abc0123.9_xyz") + ["\x07", "\u2028", "\ufeff"]
)


@FUZZ
@given(st.text(max_size=300))
def test_random_text_is_a_matrix_or_a_validation_error(text: str) -> None:
    check_outcome(text)


@FUZZ
@given(st.text(_YAML_ALPHABET, max_size=200))
def test_random_yaml_like_text_is_a_matrix_or_a_validation_error(text: str) -> None:
    check_outcome(text)


# (b) Random YAML documents --------------------------------------------------------------------

_FIELD_NAMES = sorted(
    {
        name
        for model in (
            MatrixFile,
            Entry,
            Exclusion,
            FlavourSpec,
            Flavours,
            Defaults,
            UserSpec,
            Latest,
        )
        for name in model.model_fields
    }
)
_KEYS = st.sampled_from(_FIELD_NAMES) | st.text(max_size=12)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["2.8.0", "2.14.1", "13.0", "12.8", "cpu", "3.12", "sm_90", "ubuntu-24.04"])
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=5),
    max_leaves=30,
)
_DOCUMENTS = st.dictionaries(_KEYS, _VALUES, max_size=12) | _VALUES


@FUZZ
@given(_DOCUMENTS, st.sampled_from([None, False, True]))
def test_random_yaml_document_is_a_matrix_or_a_validation_error(
    document: Any, flow: bool | None
) -> None:
    check_outcome(yaml.safe_dump(document, default_flow_style=flow, allow_unicode=True))


# (c) The base documents with random strings ---------------------------------------------------

Path_ = tuple[str | int, ...]


def _string_paths(node: Any, path: Path_ = ()) -> list[Path_]:
    """Paths of the string values (not keys) in a loaded document."""
    if isinstance(node, str):
        return [path]
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _string_paths(v, (*path, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _string_paths(v, (*path, i))]
    return []


def _set(tree: Any, path: Path_, value: Any) -> None:
    for part in path[:-1]:
        tree = tree[part]
    tree[path[-1]] = value


_LOADED = {name: yaml.safe_load(text) for name, text in BASES.items()}
_PATHS = {name: _string_paths(tree) for name, tree in _LOADED.items()}
# Half of the replacements look like matrix values, so that many documents pass
# the shape checks and reach the compatibility checks and the expansion.
_PLAUSIBLE = st.from_regex(r"\d{1,2}\.\d{1,2}(\.\d{1,2})?", fullmatch=True) | st.sampled_from(
    [
        "cpu",
        "2.8.0",
        "2.14.1",
        "2.15.0",
        "11.8",
        "12.6",
        "12.9",
        "13.0",
        "13.2",
        "3.10",
        "3.11",
        "3.12",
        "3.15",
        "sm_70",
        "sm_90",
        "sm_120",
        "ubuntu-18.04",
        "ubuntu-22.04",
        "ubuntu-24.04",
        "debian-12",
        "full",
        "slim",
        "stable",
        "../x",
        "Nightly-",
        "nightly-",
        "a" * 100,
        "ubuntu:22.04",
        "ubuntu:24.04@sha256:" + "0" * 64,
        "ghcr.io/acme/x",
    ]
)
_ANYTHING = (
    st.text(max_size=40) | st.none() | st.booleans() | st.integers() | st.floats() | st.just("")
)
_REPLACEMENTS = st.one_of(_PLAUSIBLE, _ANYTHING)


@FUZZ
@given(st.data(), st.sampled_from(sorted(BASES)))
def test_base_with_random_strings_is_a_matrix_or_a_validation_error(
    data: st.DataObject, base: str
) -> None:
    tree = copy.deepcopy(_LOADED[base])
    paths = data.draw(st.lists(st.sampled_from(_PATHS[base]), min_size=1, max_size=4))
    for path in paths:
        _set(tree, path, data.draw(_REPLACEMENTS))
    check_outcome(yaml.safe_dump(tree, allow_unicode=True, sort_keys=False))


_QUOTED = {name: list(re.finditer(r'"[^"\n]*"', text)) for name, text in BASES.items()}


@FUZZ
@given(st.data(), st.sampled_from(sorted(BASES)))
def test_base_with_raw_text_in_a_quoted_string_is_a_matrix_or_a_validation_error(
    data: st.DataObject, base: str
) -> None:
    # Unescaped: the inserted text may close the quote, add lines or break YAML.
    match = data.draw(st.sampled_from(_QUOTED[base]))
    inserted = data.draw(st.text(max_size=30) | st.text(_YAML_ALPHABET, max_size=30))
    text = BASES[base]
    check_outcome(text[: match.start() + 1] + inserted + text[match.end() - 1 :])
