"""Each command's Typer signature, made from its request type, and the request, made from what
Typer parsed: an option is declared once, on its request field (imagekit/core/requests/).

Nested parts (Selection, RenderInputs) are flattened; `Flags` become one flag each; repeatable
options are `list[...]` on the line and tuples in the request; a `choices` option is its enum on
the line and the enum's value in the request.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from imagekit.cli.common import dispatch, handles
from imagekit.core.requests.options import NOT_SET, Arg, Flags, Opt

# The request type of each command and the command's name, for tests/test_cli_options.py.
COMMANDS: dict[type, str] = {}


@dataclass(frozen=True)
class Param:
    """One parameter of a command: where its value goes (`path`: field names, outer first)."""

    path: tuple[str, ...]
    spec: Opt
    field_type: Any
    default: Any

    @property
    def name(self) -> str:
        return self.path[-1]

    @property
    def line_type(self) -> Any:
        """The type Typer parses the value as."""
        if self.spec.given_as is not None:
            return self.spec.given_as
        base, optional = _unoptional(self.field_type)
        if self.spec.choices is not None:
            return self.spec.choices | None if optional else self.spec.choices
        if typing.get_origin(base) is tuple:
            return list[typing.get_args(base)[0]] | None  # type: ignore[misc]
        return self.field_type

    @property
    def line_default(self) -> Any:
        """The default Typer shows and gives (empty: required)."""
        if self.spec.default is not NOT_SET:
            return self.spec.default
        if self.default is dataclasses.MISSING:
            return inspect.Parameter.empty
        if typing.get_origin(_unoptional(self.line_type)[0]) is list:
            return None
        if self.spec.choices is not None and self.default is not None:
            return self.spec.choices(self.default)
        return self.default

    def value(self, given: Any) -> Any:
        """What the request's field gets for the value Typer parsed."""
        if typing.get_origin(_unoptional(self.line_type)[0]) is list:
            given = tuple(given or ())
        if self.spec.parse is not None:
            return self.spec.parse(given)
        if self.spec.choices is not None and given is not None:
            return given.value
        return given

    def parameter(self) -> inspect.Parameter:
        """The parameter of the Typer function."""
        spec, make = self.spec, typer.Argument if isinstance(self.spec, Arg) else typer.Option
        names = spec.decls if make is typer.Option else ()
        info = make(
            *names, help=spec.help, envvar=spec.envvar, metavar=spec.metavar, min=spec.min,
            max=spec.max,
        )  # fmt: skip
        kind = inspect.Parameter.KEYWORD_ONLY
        annotation = typing.cast(Any, Annotated)[self.line_type, info]
        return inspect.Parameter(self.name, kind, default=self.line_default, annotation=annotation)


def _unoptional(kind: Any) -> tuple[Any, bool]:
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


def ordered(found: list[Param]) -> list[Param]:
    """`found` with each parameter that names one to follow placed right after it."""
    placed = [p for p in found if p.spec.after is None]
    for param in (p for p in found if p.spec.after is not None):
        at = next(i for i, p in enumerate(placed) if p.name == param.spec.after)
        placed.insert(at + 1, param)
    return placed


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


def command(
    group: typer.Typer,
    name: str,
    kind: type,
    make: Callable[..., object] | None = None,
    *,
    help: str | None = None,
    callback: bool = False,
    **settings: Any,
) -> Callable[[Callable[[Any], None]], Callable[[Any], None]]:
    """Register the command `name` of `group` (`callback`: the group's own, run when no
    subcommand is named): its help is `kind`'s docstring unless given, its options the
    fields of `kind`; it makes the request
    (`make(**fields)`, by default `kind(**fields)`) and dispatches it to the function this
    decorates."""
    found = ordered(list(params(kind)))
    maker = make or kind

    def run(ctx: typer.Context, **values: object) -> None:
        if ctx.invoked_subcommand is None:
            dispatch(lambda: maker(**request_of(kind, found, values)))

    context = inspect.Parameter(
        "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
    )
    signature = inspect.Signature([context, *(p.parameter() for p in found)])
    run.__signature__ = signature  # type: ignore[attr-defined]
    run.__name__ = run.__qualname__ = name.replace(" ", "_") + "_command"
    COMMANDS[kind] = name
    run.__doc__ = inspect.cleandoc(
        help or kind.__doc__ or ""
    )  # a group's callback: below its Typer(help=...)
    if callback:
        group.callback(invoke_without_command=True, **settings)(run)
    else:
        group.command(name, help=run.__doc__, **settings)(run)
    return handles(kind)
