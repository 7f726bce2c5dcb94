"""What the CLI's commands share: the app, error handling and exit codes, dispatch and the one
JSON envelope (`show`)."""

from __future__ import annotations

import contextlib
import json
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from imagekit import __version__
from imagekit.errors import ExitCode, ImagekitError, outside_error

if TYPE_CHECKING:
    from imagekit.adapters.engine import DockerEngine

app = typer.Typer(
    name="imagekit",
    help="Build and validate PyTorch GPU container images from a version matrix.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)
matrix_app = typer.Typer(help="Print the plans; `matrix refresh` follows upstream.")
app.add_typer(matrix_app, name="matrix")
compat_app = typer.Typer(help="Show and explain the compatibility data.", no_args_is_help=False)
app.add_typer(compat_app, name="compat")


@dataclass
class _State:
    debug: bool = False


STATE = _State()


def say(message: str) -> None:
    typer.echo(message, err=True)


def interrupted_code(exc: KeyboardInterrupt) -> int:
    """130 for Ctrl-C; 128 + the signal for SIGTERM, SIGHUP (see `cli.signals`)."""
    code = getattr(exc, "exit_code", None)
    return code if isinstance(code, int) else int(ExitCode.INTERRUPTED)


@contextmanager
def guard() -> Iterator[None]:
    """Turn expected failures into a message and an exit code."""
    try:
        yield
    except KeyboardInterrupt as exc:
        # After SIGHUP the terminal is gone and writing to it fails: the exit status still says
        # what ended the command.
        with contextlib.suppress(OSError):
            say(f"interrupted ({exc}); cleaned up" if str(exc) else "interrupted")
        raise typer.Exit(interrupted_code(exc)) from None
    except Exception as exc:
        error = exc if isinstance(exc, ImagekitError) else outside_error(exc)
        if error is None:
            raise  # a bug: its traceback is the report
        if STATE.debug:
            traceback.print_exc()
        say(f"error: {error.format()}")
        raise typer.Exit(int(error.exit_code)) from None


def _version(value: bool) -> None:
    if value:
        typer.echo(f"imagekit {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors.")] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    STATE.debug = debug


Request = TypeVar("Request")
# The function that carries out each kind of request; tests/unit/cli/test_cli_options.py swaps
# them to see the request a command line makes.
HANDLERS: dict[type, Callable[[Any], None]] = {}


def handles(
    kind: type[Request],
) -> Callable[[Callable[[Request], None]], Callable[[Request], None]]:
    """Register the function that carries out requests of `kind`."""

    def register(function: Callable[[Request], None]) -> Callable[[Request], None]:
        HANDLERS[kind] = function
        return function

    return register


def dispatch(make: Callable[[], object]) -> None:
    """Make a command's request from its options and carry it out; expected failures (bad
    options among them) become a message and an exit code."""
    with guard():
        request = make()
        HANDLERS[type(request)](request)


def note_leftovers(engine: DockerEngine, *, others: bool = True) -> None:
    """Remove what dead runs left on the engine and say so (`leftovers.start_notes`)."""
    from imagekit.adapters.leftovers import start_notes

    for note in start_notes(engine, others=others):
        say(note)


def print_json(data: object) -> None:
    """The one JSON envelope on stdout: indented, keys sorted."""
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


def show(as_json: bool, data: object, text: str | Callable[[], str]) -> None:
    """A command's result on stdout: `data` as JSON with --json, else the text for people
    (a callable: made only when it is shown; empty: nothing)."""
    if as_json:
        print_json(data)
    elif lines := text() if callable(text) else text:
        typer.echo(lines)
