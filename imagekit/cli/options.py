"""Each command's Typer signature, made from its request type, and the request, made from what
Typer parsed: an option is declared once, on its request field (each feature's requests.py;
the flattening and the conversions are cli/line.py's)."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any

import typer

from imagekit.cli.common import Request, dispatch, handles
from imagekit.cli.line import Param, help_text, params, request_of
from imagekit.kernel.options import Arg

# The request type of each command and the command's name, for tests/unit/cli/test_cli_options.py.
COMMANDS: dict[type, str] = {}


def typer_parameter(param: Param) -> inspect.Parameter:
    """The parameter of the Typer function; a flag gets an empty metavar (no "<bool>")."""
    spec, make = param.spec, typer.Argument if isinstance(param.spec, Arg) else typer.Option
    names = spec.decls if make is typer.Option else ()
    metavar = "" if spec.metavar is None and param.line_type is bool else spec.metavar
    info = make(
        *names, help=spec.help, envvar=spec.envvar, metavar=metavar, min=spec.min, max=spec.max
    )
    kind = inspect.Parameter.KEYWORD_ONLY
    annotation = typing.cast(Any, Annotated)[param.line_type, info]
    return inspect.Parameter(param.name, kind, default=param.line_default, annotation=annotation)


def command(
    group: typer.Typer,
    name: str,
    kind: type[Request],
    make: Callable[..., Request] | None = None,
    *,
    callback: bool = False,
    context_settings: dict[str, bool] | None = None,
) -> Callable[[Callable[[Request], None]], Callable[[Request], None]]:
    """Register the command `name` of `group` (`callback`: the group's own, run when no
    subcommand is named): its help is `kind`'s docstring, its options the fields
    of `kind`; it makes the request (`make(**fields)`, by default `kind(**fields)`) and
    dispatches it to the function this decorates."""
    found = list(params(kind))
    maker = make or kind

    def run(ctx: typer.Context, **values: object) -> None:
        if ctx.invoked_subcommand is None:
            dispatch(lambda: maker(**request_of(kind, found, values)))

    context = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
    run.__signature__ = inspect.Signature([context, *map(typer_parameter, found)])  # type: ignore[attr-defined]
    run.__name__ = run.__qualname__ = f"{name}_command"
    # A group's callback (compat) takes its help from its Typer(help=...), as before.
    run.__doc__ = help_text(kind.__doc__)
    COMMANDS[kind] = name
    if callback:
        group.callback(invoke_without_command=True, context_settings=context_settings)(run)
    else:
        group.command(name, help=run.__doc__, context_settings=context_settings)(run)
    return handles(kind)
