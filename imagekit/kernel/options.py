"""How a request's fields are given on the command line, declared once, beside each field.

A field reads `matrix: Annotated[Path, MATRIX] = Path("matrix.yaml")`: its type, its default and
its option, in one place. These are plain values: imagekit/cli/options.py turns them into the
Typer command (names, help, envvar, bounds) and the values parsed back into the request. A
field with no `Opt`/`Arg` is no option: its command fills it (from the environment, say).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, Final

from imagekit.kernel.vocabulary import Flavour, Platform

NOT_SET: Final = object()  # an option with no default of its own


class Opt:
    """A command-line option: its names (`"--matrix", "-m"`; a flag with a negation is
    `"--structure/--no-structure"`), help, and what the option layer needs to know.

    `choices`: a StrEnum the option is typed as on the line, the field getting its value.
    `given_as`: the type on the line when it is not the field's (the field gets `parse(value)`);
    `default`: the line's default then. A repeatable option (`list[...]` on the line) arrives as
    a tuple. `--help` lists the options in field order."""

    def __init__(
        self,
        *decls: str,
        help: str,
        envvar: str | None = None,
        min: float | None = None,
        max: float | None = None,
        metavar: str | None = None,
        choices: type[StrEnum] | None = None,
        parse: Callable[[Any], object] | None = None,  # each takes what its line gives
        given_as: object = None,  # a type expression
        default: object = NOT_SET,
    ) -> None:
        self.decls, self.help, self.envvar, self.metavar = decls, help, envvar, metavar
        self.min, self.max, self.choices, self.parse = min, max, choices, parse
        self.given_as, self.default = given_as, default


class Arg(Opt):
    """A positional argument (repeatable when its field is a tuple)."""

    def __init__(self, *, help: str) -> None:
        super().__init__(help=help)


class Flags:
    """A field chosen by one of several flags (`--ssh`, `--shell`): each flag an `Opt`; the
    command's request maker gets {flag name: given} for the field."""

    def __init__(self, **flags: Opt) -> None:
        self.flags: Mapping[str, Opt] = flags


def comma_separated(text: str | None) -> tuple[str, ...]:
    """`a,b` as ("a", "b"): `--probes`, `--include`."""
    return tuple(p for p in (text or "").split(",") if p)


# Options several commands share ----------------------------------------------------------------

MATRIX = Opt("--matrix", "-m", help="The matrix file.")
ONLY = Opt("--only", help="Pick images by name, cell id or tag prefix (repeatable).")
FLAVOUR = Opt("--flavour", help="Only this flavour.", choices=Flavour)
PLATFORM = Opt("--platform", help="Only the images of this Docker platform.", choices=Platform)
JSON = Opt("--json", help="Print machine-readable JSON on stdout.")
RESULTS = Opt(
    "--results", help="Folder that receives results/<run-id>/.", envvar="IMAGEKIT_RESULTS"
)
GPUS = Opt("--gpus", help="auto: GPUs when the engine has them.")
REGISTRY = Opt("--registry", help="This registry instead of the matrix's.")
SIGNING_KEY = Opt(
    "--signing-key",
    envvar="IMAGEKIT_SIGNING_KEY",
    help="A cosign private key (its password in COSIGN_PASSWORD): sign each digest and attach "
    "the records as attestations.",
)
PROBES = Opt(
    "--probes",
    help="Comma-separated probes (default: all that apply).",
    given_as=str | None,
    default=None,
    parse=comma_separated,
)
TIMEOUT = Opt("--timeout-s", help="Time limit per image in seconds (default: from the probes).")
NODES = Opt(
    "--nodes",
    min=1,
    max=16,
    help="Also run the multi-node DDP probe (ddp_nodes) across this many nodes: "
    "containers of the image on a network of their own (verify), or torchrun processes "
    "on loopback (probe).",
)
