"""The `imagekit` command line: parse options, call one function, print, map errors to exit codes.

stdout carries data (tables, `--json`); stderr carries messages for people.
Expected failures print one message with a hint and exit with their kind's code;
`--debug` adds the traceback.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from imagekit import __version__
from imagekit.errors import ExitCode, ImagekitError, InputError

app = typer.Typer(
    name="imagekit",
    help="Build and validate PyTorch GPU container images from a version matrix.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)
compat_app = typer.Typer(help="Show and explain the compatibility data.", no_args_is_help=False)
app.add_typer(compat_app, name="compat")


@dataclass
class _State:
    debug: bool = False


STATE = _State()

MatrixOption = Annotated[
    Path, typer.Option("--matrix", "-m", help="The matrix file.", show_default=True)
]
OnlyOption = Annotated[
    list[str] | None,
    typer.Option("--only", help="Pick images by name, cell id or tag prefix (repeatable)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]


class FlavourChoice(StrEnum):
    slim = "slim"
    full = "full"


class MatrixFormat(StrEnum):
    table = "table"
    json = "json"
    github = "github"


FlavourOption = Annotated[
    FlavourChoice | None, typer.Option("--flavour", help="Only this flavour.")
]


def _say(message: str) -> None:
    typer.echo(message, err=True)


@contextmanager
def _guard() -> Iterator[None]:
    """Turn expected failures into a message and an exit code."""
    try:
        yield
    except ImagekitError as exc:
        if STATE.debug:
            traceback.print_exc()
        _say(f"error: {exc.format()}")
        raise typer.Exit(int(exc.exit_code)) from None
    except KeyboardInterrupt:
        _say("interrupted")
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None


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


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


# matrix ----------------------------------------------------------------------


@app.command("matrix")
def matrix_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    fmt: Annotated[MatrixFormat, typer.Option("--format", help="Output format.")] = (
        MatrixFormat.table
    ),
) -> None:
    """List the images the matrix expands to."""
    from imagekit.matrix import load_matrix
    from imagekit.report import plan_row, plans_table

    with _guard():
        loaded = load_matrix(matrix)
        plans = loaded.select(only, flavour.value if flavour else None)
        if fmt is MatrixFormat.github:
            include = [plan_row(p) for p in plans]
            typer.echo(json.dumps({"include": include}, sort_keys=True))
        elif fmt is MatrixFormat.json:
            _print_json([plan_row(p) for p in plans])
        else:
            typer.echo(plans_table(plans))
            _say(f"{matrix}: {len(loaded.cells)} cells, {len(plans)} images")


# check -----------------------------------------------------------------------


@app.command("check")
def check_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    json_out: JsonOption = False,
) -> None:
    """Validate the matrix and lint every rendered Dockerfile (exit 0 or 2)."""
    from imagekit.lint import hadolint_binary, lint
    from imagekit.matrix import load_matrix
    from imagekit.render import RenderOptions, render_image

    with _guard():
        loaded = load_matrix(matrix)
        for warning in loaded.warnings:
            _say(f"warning: {warning.format()}")
        binary = hadolint_binary()
        findings = []
        variants = (RenderOptions(), RenderOptions(buildkit=True, ca_bundle=True))
        for plan in loaded.plans:
            for options in variants:
                rendered = render_image(plan, options)
                kind = "buildkit" if options.buildkit else "docker"
                findings += lint(f"{plan.name} ({kind})", rendered.dockerfile, binary)
        failing = [f for f in findings if f.fails]
        for finding in findings:
            _say(finding.format())
        linted = len(loaded.plans) * len(variants)
        if json_out:
            _print_json(
                {
                    "matrix": str(matrix),
                    "cells": len(loaded.cells),
                    "images": len(loaded.plans),
                    "dockerfiles_linted": linted,
                    "findings": [f.__dict__ for f in findings],
                    "warnings": [w.format() for w in loaded.warnings],
                    "ok": not failing,
                }
            )
        if failing:
            raise InputError(
                f"hadolint reported {len(failing)} problems in the rendered Dockerfiles",
                "fix templates/Dockerfile.j2, or ignore a rule with its reason in "
                "imagekit/data/hadolint.yaml",
            )
        _say(
            f"{matrix}: ok: {len(loaded.cells)} cells, {len(loaded.plans)} images, "
            f"{linted} Dockerfiles lint clean"
        )


# render ----------------------------------------------------------------------


@app.command("render")
def render_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    out: Annotated[Path, typer.Option("--out", help="Folder for the build contexts.")] = Path(
        "out"
    ),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    wheelhouse: Annotated[
        Path | None, typer.Option(help="Install from these wheels only (offline).")
    ] = None,
    ca_cert: Annotated[
        Path | None,
        typer.Option(
            help="Extra CA bundle for pip (builder stages only). "
            "Default: $PIP_CERT, $SSL_CERT_FILE or $REQUESTS_CA_BUNDLE."
        ),
    ] = None,
    no_ca_cert: Annotated[bool, typer.Option(help="Use no extra CA bundle.")] = False,
    pip_index_url: Annotated[str | None, typer.Option(help="Mirror for every index.")] = None,
    extra_index_url: Annotated[
        list[str] | None, typer.Option(help="Additional index (repeatable).")
    ] = None,
    buildkit: Annotated[bool, typer.Option(help="Render BuildKit syntax (cache, secrets).")] = (
        False
    ),
    created: Annotated[str | None, typer.Option(help="org.opencontainers.image.created")] = None,
    revision: Annotated[str | None, typer.Option(help="org.opencontainers.image.revision")] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Compare with what --out holds; exit 1 if different.")
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Write a Dockerfile and build context per image (one folder each)."""
    from imagekit.context import ContextInputs, compare_tree, render_tree, resolve_ca_bundle
    from imagekit.matrix import load_matrix
    from imagekit.render import RenderOptions

    with _guard():
        loaded = load_matrix(matrix)
        plans = loaded.select(only, flavour.value if flavour else None)
        ca = None if no_ca_cert else resolve_ca_bundle(ca_cert)
        if wheelhouse is not None and not wheelhouse.is_dir():
            raise InputError(f"--wheelhouse {wheelhouse} is not a folder")
        options = RenderOptions(
            wheelhouse=wheelhouse is not None,
            ca_bundle=ca is not None,
            pip_index_url=pip_index_url,
            extra_index_urls=tuple(extra_index_url or ()),
            buildkit=buildkit,
            created=created,
            revision=revision,
        )
        inputs = ContextInputs(wheelhouse=wheelhouse, ca_bundle=ca)
        if check:
            differences = compare_tree(plans, options, inputs, out)
            for line in differences:
                _say(line)
            if differences:
                _say(f"{out}: {len(differences)} differences; re-render with `make goldens`")
                raise typer.Exit(1)
            _say(f"{out}: {len(plans)} images match a fresh render")
            return
        folders = render_tree(plans, options, inputs, out)
        if json_out:
            _print_json([str(f) for f in folders])
        else:
            for folder in folders:
                typer.echo(str(folder))
        _say(f"rendered {len(folders)} images into {out}")


# compat ----------------------------------------------------------------------


@compat_app.callback(invoke_without_command=True)
def compat_show(
    ctx: typer.Context,
    torch: Annotated[str | None, typer.Option(help="Show one release, e.g. 2.8.0.")] = None,
    json_out: JsonOption = False,
) -> None:
    """Show the compatibility table (or one release)."""
    if ctx.invoked_subcommand is not None:
        return
    from imagekit.compat import load_compat
    from imagekit.report import compat_rows, table

    with _guard():
        data = load_compat()
        if torch is not None and torch not in data.torch:
            raise InputError(
                f"torch {torch} is not a release imagekit knows",
                f"known releases: {', '.join(data.torch_versions())}",
            )
        releases = [torch] if torch else data.torch_versions()
        if json_out:
            _print_json({t: data.torch[t].model_dump(mode="json") for t in releases})
            return
        header, rows = compat_rows(data, releases)
        typer.echo(table(header, rows))
        _say("* experimental in PyTorch's release matrix; ~ inferred, checked at verify time")


@compat_app.command("explain")
def compat_explain(
    torch: Annotated[str, typer.Option(help="PyTorch release, e.g. 2.8.0.")],
    cuda: Annotated[str, typer.Option(help="CUDA version, e.g. 12.8, or cpu.")],
    python: Annotated[str | None, typer.Option(help="Python, e.g. 3.12.")] = None,
    os_name: Annotated[str | None, typer.Option("--os", help="Base OS, e.g. ubuntu-24.04.")] = (
        None
    ),
    json_out: JsonOption = False,
) -> None:
    """Explain one cell: what it derives to, or why it cannot be built."""
    from imagekit.compat import load_compat
    from imagekit.report import explain_cell

    with _guard():
        facts, reasons = explain_cell(load_compat(), torch, cuda, python, os_name)
        if json_out:
            _print_json({"ok": not reasons, "facts": facts, "reasons": reasons})
        else:
            for key, value in facts.items():
                typer.echo(f"{key:<18} {value}")
        if reasons:
            raise InputError("cannot build this cell:\n  - " + "\n  - ".join(reasons))


# schema ----------------------------------------------------------------------


@app.command("schema")
def schema_command(
    out: Annotated[Path | None, typer.Option(help="Write to this file instead of stdout.")] = None,
) -> None:
    """Print the JSON Schema of matrix.yaml (for editors and CI)."""
    from imagekit.matrix_schema import json_schema

    text = json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        _say(f"wrote {out}")


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        _say("interrupted")
        sys.exit(int(ExitCode.INTERRUPTED))
