"""Option names read as English: a flag whose name already says "no" has no `--no-no-...`
twin (Typer adds `--no-X` to every boolean option unless its names are given)."""

from __future__ import annotations

import typer

from imagekit.cli import app


def _options(command: typer.core.TyperCommand | typer.core.TyperGroup, path: str) -> list[str]:
    found = []
    ctx = command.context_class(command, info_name=path)
    for name in getattr(command, "list_commands", lambda _: [])(ctx):
        sub = command.get_command(ctx, name)  # type: ignore[attr-defined]
        found += _options(sub, f"{path} {name}")
    for param in command.params:
        found += [f"{path} {o}" for o in (*param.opts, *getattr(param, "secondary_opts", []))]
    return found


def test_no_option_is_named_no_no() -> None:
    options = _options(typer.main.get_command(app), "imagekit")
    assert len(options) > 100
    assert [o for o in options if "--no-no-" in o] == []
