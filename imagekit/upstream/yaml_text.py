"""A YAML text edited as a person would edit it: where a node is, and lines or text inserted at
places PyYAML's composer reports, every other byte kept (comments, anchors, flow mappings, which
a YAML round-trip library would reflow). Pure; the refresh proposal's editor (`refresh.py`)."""

from __future__ import annotations

import json

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode


def value_at(node: Node | None, key: str) -> Node | None:
    """The value of `key` in the mapping `node`; None where `node` is no mapping or lacks it."""
    if not isinstance(node, MappingNode):
        return None
    return next((v for k, v in node.value if isinstance(k, ScalarNode) and k.value == key), None)


def end_line(node: Node) -> int:
    """The 0-based line after which text following `node` may be inserted."""
    children: list[Node] = []
    if isinstance(node, MappingNode) and not node.flow_style:
        children = [v for _, v in node.value]
    elif isinstance(node, SequenceNode) and not node.flow_style:
        children = list(node.value)
    if children:
        return max(end_line(c) for c in children)
    mark = node.end_mark
    return mark.line - 1 if mark.column == 0 else mark.line


class YamlText:
    """A YAML text and the edits proposed to it: lines inserted after a line, or text inserted
    at a place in a line, applied bottom up so that every position stays right."""

    def __init__(self, file: str, text: str) -> None:
        self.file, self.text = file, text
        self.root = yaml.compose(text, Loader=yaml.SafeLoader)
        self.inserts: list[tuple[int, int, str]] = []  # (line, column or -1, text)

    def after(self, line: int, lines: list[str]) -> None:
        self.inserts.append((line, -1, "".join(f"{x}\n" for x in lines)))

    def at(self, line: int, column: int, text: str) -> None:
        self.inserts.append((line, column, text))

    def result(self) -> str:
        lines = self.text.splitlines(keepends=True)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        for line, column, text in sorted(self.inserts, key=lambda e: (e[0], e[1]), reverse=True):
            if column < 0:
                lines.insert(line + 1, text)
            else:
                lines[line] = lines[line][:column] + text + lines[line][column:]
        return "".join(lines)


def flow_list(values: list[str]) -> str:
    """`values` as a one-line YAML list of quoted strings: `["12.6", "cpu"]`."""
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"
