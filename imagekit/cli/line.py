"""A request type as command-line parameters, and the values parsed back into its fields: pure,
whatever parses the line (imagekit/cli/options.py makes the Typer command of it).

Nested parts (Selection, RenderInputs) are flattened; `Flags` become one flag each; repeatable
options are lists on the line and tuples in the request; a `choices` option is its enum on the
line and the enum's value in the request.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from imagekit.kernel.options import NOT_SET, Flags, Opt


@dataclass(frozen=True)
class Param:
    """One parameter of a command: where its value goes (`path`: field names, outer first)."""

    path: tuple[str, ...]
    spec: Opt
    field_type: object  # a type expression (`str | None`, `tuple[Path, ...]`)
    default: object

    @property
    def name(self) -> str:
        return self.path[-1]

    @property
    def line_type(self) -> object:
        """The type the value is parsed as (a repeatable option's: a list)."""
        if self.spec.given_as is not None:
            return self.spec.given_as
        base, optional = _unoptional(self.field_type)
        if self.spec.choices is not None:
            return self.spec.choices | None if optional else self.spec.choices
        if typing.get_origin(base) is tuple:
            return list[typing.get_args(base)[0]] | None  # type: ignore[misc]
        return self.field_type

    @property
    def line_default(self) -> object:
        """The default the command line shows and gives (empty: required)."""
        if self.spec.default is not NOT_SET:
            return self.spec.default
        if self.default is dataclasses.MISSING:
            return inspect.Parameter.empty
        if typing.get_origin(_unoptional(self.line_type)[0]) is list:
            return None
        if self.spec.choices is not None and isinstance(self.default, str):
            return self.spec.choices(self.default)
        return self.default

    def value(self, given: object) -> object:
        """What the request's field gets for the value parsed."""
        if typing.get_origin(_unoptional(self.line_type)[0]) is list:
            given = tuple(given) if isinstance(given, list | tuple) else ()
        if self.spec.parse is not None:
            return self.spec.parse(given)
        if self.spec.choices is not None and isinstance(given, str):
            return self.spec.choices(given)
        return given


def _unoptional(kind: object) -> tuple[object, bool]:
    """`X | None` as (X, True); anything else as (it, False)."""
    args = typing.get_args(kind)
    if type(None) in args and typing.get_origin(kind) in (typing.Union, type(int | None)):
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else kind), True
    return kind, False


def params(kind: type, path: tuple[str, ...] = ()) -> Iterator[Param]:
    """The command-line parameters of a request type, in field order, nested parts flattened."""
    hints = typing.get_type_hints(kind, include_extras=True)
    for field in dataclasses.fields(kind):
        hint = hints[field.name]
        specs = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Opt | Flags)]
        if not specs and dataclasses.is_dataclass(hint):
            yield from params(typing.cast(type, hint), (*path, field.name))
            continue
        if not specs:
            continue  # no option: the command's maker fills it
        default = field.default
        if field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        spec, field_type = specs[0], typing.get_args(hint)[0]
        if isinstance(spec, Flags):
            for name, flag in spec.flags.items():
                yield Param((*path, field.name, name), flag, bool, False)
        else:
            yield Param((*path, field.name), spec, field_type, default)


def request_of(kind: type, found: list[Param], values: Mapping[str, object]) -> dict[str, object]:
    """The keyword arguments of `kind` from the parsed values (its nested parts made)."""
    fields: dict[str, object] = {}
    parts: dict[str, dict[str, object]] = {}
    for param in found:
        value = param.value(values[param.name])
        if len(param.path) == 1:
            fields[param.name] = value
        else:
            parts.setdefault(param.path[0], {})[param.name] = value
    hints = typing.get_type_hints(kind)
    for name, given in parts.items():
        # A nested part (Selection) is made; a field of `Flags` gets {flag: given}.
        made = dataclasses.is_dataclass(hints[name])
        fields[name] = hints[name](**given) if made else given
    return fields


def help_text(doc: str | None) -> str:
    """A command's help from its docstring, each paragraph on one line: the commands list shows
    the first, and a line break kept in one broke the sentence off mid-way wherever the
    terminal wrapped it."""
    paragraphs = inspect.cleandoc(doc or "").split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)
