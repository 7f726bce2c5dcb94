"""A JSON document someone else wrote (an OSV record, a scanner's report), read as the audit
reports bad input: what is not JSON at its `file:line:col`, what has the wrong shape at the JSON
path of the value. Pure."""

from __future__ import annotations

import json

from imagekit.errors import Problem
from imagekit.kernel.json import JsonValue

OUTCOME = "nothing was audited"  # the last line of a ValidationError the audit raises


class WrongShape(Exception):
    """A document's value at a JSON path is not what its writer writes there."""


def kind_of(value: JsonValue) -> str:
    """How a JSON value is named in a message: `an object`, `a list`, `null`, ..."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "true or false"}
    return "null" if value is None else names.get(type(value), "a number")


def decoded(data: bytes, file: str, hint: str) -> JsonValue | Problem:
    """The JSON value of `data`, or the Problem at the line and column where it is not UTF-8
    text or not JSON."""
    try:
        value: JsonValue = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - data.rfind(b"\n", 0, exc.start)
        return Problem(file, line, col, "not UTF-8 text", hint)
    except json.JSONDecodeError as exc:
        return Problem(file, exc.lineno, exc.colno, f"not JSON: {exc.msg}", hint)
    return value
