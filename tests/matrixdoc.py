"""Helpers for tests of matrix documents: where a problem is, and what `parse_matrix` reports.

Positions are computed from the document text itself (`at`), so a test reads "the problem is
at `12.10`" rather than a bare pair of numbers.
"""

from __future__ import annotations

import pytest

from imagekit.errors import Problem, ValidationError
from imagekit.matrix.compat import CompatData
from imagekit.matrix.load import parse_matrix

FILE = "matrix.yaml"


def at(text: str, context: str, target: str | None = None) -> tuple[int, int]:
    """1-based line/col of `target` inside the one occurrence of `context` in `text`.

    Without `target`, the position of `context` itself.
    """
    assert text.count(context) == 1, f"{context!r} occurs {text.count(context)} times"
    offset = text.index(context)
    if target is not None:
        assert target in context, f"{target!r} is not in {context!r}"
        offset += context.index(target)
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col


def problems(text: str, compat: CompatData | None = None) -> list[Problem]:
    """The problems `parse_matrix` reports for `text` (it must reject it)."""
    with pytest.raises(ValidationError) as info:
        parse_matrix(text, FILE, compat)
    found = info.value.problems
    assert found, "a ValidationError must carry at least one problem"
    assert all(p.file == FILE for p in found)
    return found


def one_problem(text: str, compat: CompatData | None = None) -> Problem:
    """The single problem `parse_matrix` reports for `text`."""
    found = problems(text, compat)
    assert len(found) == 1, "\n".join(p.format() for p in found)
    return found[0]


def where(problem: Problem) -> tuple[int, int]:
    """A problem's (line, col)."""
    return problem.line, problem.col
