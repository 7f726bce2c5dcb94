"""Load YAML into plain data while remembering where every value came from.

PyYAML's loaders lose positions, silently keep the last of two duplicate keys,
turn `12.10` into the float 12.1 and `no` into False, and (unsafe ones) build
arbitrary objects from tags. This module composes the node graph with the safe
loader and converts it by hand, so that:

- every mapping key and value has a `line:col` (1-based) in a `SourceMap`;
- duplicate keys, non-standard tags, merge keys, control characters and
  non-scalar keys are reported as `Problem`s, all of them at once;
- each scalar remembers how YAML typed it, so a later validator can say
  "YAML read 12.10 as the number 12.1; quote it".
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from imagekit.errors import Problem, ValidationError
from imagekit.kernel.json import JsonObject, JsonValue

Path = tuple[str | int, ...]

_YAML = "tag:yaml.org,2002:"
_SCALAR_TAGS = {f"{_YAML}{t}" for t in ("str", "int", "float", "bool", "null", "timestamp")}
# A document may not expand (through aliases) into more values than this:
# a guard against "billion laughs" documents.
_MAX_VALUES = 100_000
_MAX_DEPTH = 64


@dataclass(frozen=True)
class Scalar:
    """How YAML typed one scalar: its resolved tag, quoting style and source text."""

    tag: str
    quoted: bool
    text: str

    @property
    def kind(self) -> str:
        """`str`, `int`, `float`, `bool`, `null` or `timestamp`."""
        return self.tag.removeprefix(_YAML)


@dataclass
class SourceMap:
    """Positions of the values (and keys) of a loaded document, by path."""

    file: str
    values: dict[Path, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path, tuple[int, int]] = field(default_factory=dict)
    scalars: dict[Path, Scalar] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    poisoned: set[Path] = field(default_factory=set)

    def is_poisoned(self, path: Path) -> bool:
        """Whether a problem was already reported at `path` or one of its ancestors."""
        return any(path[: len(p)] == p for p in self.poisoned)

    def position(self, path: Path, *, key: bool = False) -> tuple[int, int]:
        """The line/col of `path` (its key when `key`), else of its nearest ancestor."""
        table = self.keys if key else self.values
        probe = tuple(path)
        while probe:
            if probe in table:
                return table[probe]
            if probe in self.values:
                return self.values[probe]
            probe = probe[:-1]
        return self.values.get((), (1, 1))

    def problem(self, path: Path, message: str, hint: str = "", *, key: bool = False) -> Problem:
        """A `Problem` located at `path` in this file."""
        line, col = self.position(path, key=key)
        return Problem(self.file, line, col, message, hint)


def _pos(node: Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def bad_characters(text: str) -> list[str]:
    """Names of control characters (newlines included) found in `text`."""
    found = []
    for ch in text:
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            found.append(f"U+{ord(ch):04X}")
    return sorted(set(found))


# What YAML counts as a line break (YAML 1.1, as PyYAML reads it).
_LINE_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")


def _offset_position(text: str, offset: int) -> tuple[int, int]:
    """The 1-based line/col of character `offset` in `text`, as PyYAML's marks count them."""
    line, start = 1, 0
    for match in _LINE_BREAK.finditer(text, 0, offset):
        line, start = line + 1, match.end()
    return line, offset - start + 1


class _Converter:
    def __init__(self, source: SourceMap) -> None:
        self.source = source
        self.problems: list[Problem] = []
        self.count = 0
        self.constructor = SafeConstructor()

    def problem(self, node: Node, message: str, hint: str = "", path: Path | None = None) -> None:
        line, col = _pos(node)
        self.problems.append(Problem(self.source.file, line, col, message, hint))
        if path is not None:
            self.source.poisoned.add(path)

    def convert(self, node: Node, path: Path, depth: int = 0) -> JsonValue:
        self.count += 1
        if self.count > _MAX_VALUES or depth > _MAX_DEPTH:
            raise _TooLarge(node)
        self.source.values.setdefault(path, _pos(node))
        if isinstance(node, ScalarNode):
            return self.scalar(node, path)
        if node.tag not in (f"{_YAML}map", f"{_YAML}seq"):
            self.problem(
                node,
                f"YAML tag {node.tag!r} is not allowed here",
                "imagekit reads plain YAML only: remove the tag",
                path,
            )
            return None
        if isinstance(node, SequenceNode):
            return [self.convert(item, (*path, i), depth + 1) for i, item in enumerate(node.value)]
        assert isinstance(node, MappingNode)
        return self.mapping(node, path, depth)

    def scalar(self, node: ScalarNode, path: Path) -> JsonValue:
        if node.tag not in _SCALAR_TAGS:
            self.problem(
                node,
                f"YAML tag {node.tag!r} is not allowed here",
                "imagekit reads plain YAML only: remove the tag and quote the value",
                path,
            )
            return None
        quoted = node.style in ("'", '"')
        self.source.scalars[path] = Scalar(node.tag, quoted, node.value)
        if node.tag == f"{_YAML}timestamp":
            # A date is only ever meant as text in a matrix.
            return str(node.value)
        if node.tag == f"{_YAML}str":
            bad = bad_characters(node.value)
            if bad:
                self.problem(
                    node,
                    f"control characters or line breaks ({', '.join(bad)}) are not allowed "
                    "in a value",
                    "values end up in Dockerfiles and tags; keep each on one line",
                    path,
                )
            return str(node.value)
        try:
            # An int, a float, a bool or None: the only other tags allowed here.
            value: JsonValue = self.constructor.construct_object(node, deep=True)
            return value
        except (ConstructorError, ValueError) as exc:
            self.problem(node, f"cannot read value {node.value!r}: {exc}", path=path)
            return None

    def mapping(self, node: MappingNode, path: Path, depth: int) -> JsonObject:
        result: JsonObject = {}
        first_seen: dict[str, tuple[int, int]] = {}
        for key_node, value_node in node.value:
            if key_node.tag == f"{_YAML}merge":
                self.problem(
                    key_node,
                    "YAML merge keys (<<) are not supported",
                    "write the keys out, or put shared settings under `defaults`",
                    path,
                )
                continue
            if not isinstance(key_node, ScalarNode) or key_node.tag not in _SCALAR_TAGS:
                self.problem(key_node, "a mapping key must be a plain word", path=path)
                continue
            key = key_node.value
            bad = bad_characters(key)
            if bad:
                self.problem(key_node, f"control characters ({', '.join(bad)}) in a key", path=path)
                continue
            if key in first_seen:
                line, col = first_seen[key]
                self.problem(
                    key_node,
                    f"duplicate key {key!r} (first defined at line {line}, column {col})",
                    "YAML would silently keep only the last one; remove one of them",
                    (*path, key),
                )
                continue
            first_seen[key] = _pos(key_node)
            self.source.keys[(*path, key)] = _pos(key_node)
            result[key] = self.convert(value_node, (*path, key), depth + 1)
        return result


class _TooLarge(Exception):
    def __init__(self, node: Node) -> None:
        self.node = node


def load_yaml(text: str, file: str) -> tuple[JsonValue, SourceMap]:
    """Parse one YAML document into plain data and its `SourceMap`.

    Syntax errors raise `ValidationError`. Other problems (duplicate keys,
    tags, control characters) are collected in `SourceMap.problems` and the
    offending values left out, so that later checks can report theirs too.
    Never raises any other exception for bad text.
    """
    nodes = _compose(text, file)
    source = SourceMap(file)
    if len(nodes) > 1:
        line, col = _pos(nodes[1])
        raise ValidationError(
            [Problem(file, line, col, "more than one YAML document", "keep one document")]
        )
    if not nodes:
        return None, source
    converter = _Converter(source)
    try:
        data = converter.convert(nodes[0], ())
    except _TooLarge as exc:
        line, col = _pos(exc.node)
        raise ValidationError(
            [
                Problem(
                    file,
                    line,
                    col,
                    "document too large or too deeply nested (aliases expand too far)",
                    "a matrix needs no more than a few hundred values",
                )
            ]
        ) from None
    source.problems.extend(converter.problems)
    return data, source


def _compose(text: str, file: str) -> list[Node]:
    """The node graphs of the documents in `text`; a syntax error raises `ValidationError`,
    located where YAML found it."""
    try:
        return list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        what = exc.problem or exc.context or "invalid YAML"
        raise ValidationError(
            [Problem(file, line, col, f"not valid YAML: {what}", "fix the syntax at this place")]
        ) from None
    except yaml.reader.ReaderError as exc:
        # Not a MarkedYAMLError: it knows only the offset of the character, and
        # its text spans lines; locate it like any other problem.
        line, col = _offset_position(text, exc.position)
        raise ValidationError(
            [
                Problem(
                    file,
                    line,
                    col,
                    f"not valid YAML: character U+{exc.character:04X} is not allowed",
                    "a matrix holds printable text only; remove the character",
                )
            ]
        ) from None
    except yaml.YAMLError as exc:  # any other error that carries no position
        raise ValidationError([Problem(file, 1, 1, f"not valid YAML: {exc}")]) from None
    except RecursionError:
        raise ValidationError([Problem(file, 1, 1, "YAML nested too deeply")]) from None
