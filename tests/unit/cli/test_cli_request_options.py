"""cli/line.py and cli/options.py: a request type becomes its command's parameters
(each option declared once, on its field) and the values parsed become the request."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import imagekit.cli  # noqa: F401  (registers every command)
from imagekit.build.requests import BuildCommand
from imagekit.cli.line import params, request_of
from imagekit.cli.options import COMMANDS
from imagekit.kernel.options import Flags, Opt
from imagekit.kernel.vocabulary import Flavour
from imagekit.matrix.requests import MatrixRequest
from imagekit.matrix.selection import Selection
from imagekit.serve.requests import RunCommand

# Fields no option sets: the command fills them (SOURCE_DATE_EPOCH, read from the environment).
MADE_BY_THE_COMMAND = {
    ("BootstrapCommand", "source_date_epoch"),
    ("BuildSettings", "source_date_epoch"),
}


def test_nested_parts_are_flattened_in_field_order() -> None:
    names = [p.name for p in params(BuildCommand)]
    assert names[:6] == ["matrix", "only", "flavour", "platform", "builder", "jobs"]
    assert names.index("network") + 1 == names.index("wheelhouse")
    assert names[-2:] == ["results", "json"]


def test_repeatable_options_are_lists_on_the_line_and_tuples_in_the_request() -> None:
    only = next(p for p in params(MatrixRequest) if p.name == "only")
    assert only.line_type == list[str] | None and only.line_default is None
    assert only.value(["a", "b"]) == ("a", "b") and only.value(None) == ()


def test_a_choice_is_its_enum_on_the_line_and_its_value_in_the_request() -> None:
    flavour = next(p for p in params(MatrixRequest) if p.name == "flavour")
    assert flavour.line_type == Flavour | None
    assert flavour.value(Flavour.FULL) == Flavour.FULL and flavour.value(None) is None
    fmt = next(p for p in params(MatrixRequest) if p.name == "format")
    assert fmt.line_default.value == "table" and fmt.value(fmt.line_default) == "table"


def test_request_of_makes_nested_parts_and_gives_flags_as_a_mapping() -> None:
    found = list(params(MatrixRequest))
    values = {p.name: p.line_default for p in found} | {"only": ["x"]}
    made = request_of(MatrixRequest, found, values)
    assert made == {"selection": Selection(Path("matrix.yaml"), ("x",)), "format": "table"}
    found = list(params(RunCommand))
    values = {p.name: None for p in found} | {"image": "i", "ssh": True, "jupyter": False}
    service = request_of(RunCommand, found, values)["service"]
    assert isinstance(service, dict) and service["ssh"] is True


def test_every_field_of_every_command_s_request_is_an_option_or_made_by_its_command() -> None:
    loose = set()
    for kind in COMMANDS:
        for owner in (kind, *_parts(kind)):
            hints = typing.get_type_hints(owner, include_extras=True)
            for field in dataclasses.fields(owner):
                meta = getattr(hints[field.name], "__metadata__", ())
                part = dataclasses.is_dataclass(hints[field.name])
                if not part and not any(isinstance(m, Opt | Flags) for m in meta):
                    loose.add((owner.__name__, field.name))
    assert loose == MADE_BY_THE_COMMAND


def _parts(kind: type) -> list[type]:
    hints = typing.get_type_hints(kind)
    return [h for h in hints.values() if isinstance(h, type) and dataclasses.is_dataclass(h)]
