"""Commands that work from the matrix alone: matrix, check, render, compat, schema, tags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from imagekit.cli.common import (
    BaseOverrideOption,
    CaCertOption,
    CreatedOption,
    ExtraIndexOption,
    FlavourOption,
    JsonOption,
    MatrixFormat,
    MatrixOption,
    NoCaCertOption,
    OnlyOption,
    PipIndexOption,
    RevisionOption,
    WheelhouseOption,
    app,
    compat_app,
    guard,
    print_json,
    render_inputs,
    say,
)
from imagekit.errors import (
    InputError,
)

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

    with guard():
        loaded = load_matrix(matrix)
        github = fmt is MatrixFormat.github
        plans = loaded.select(only, flavour.value if flavour else None, allow_empty=github)
        if github:
            include = [plan_row(p) for p in plans]
            # Compact, one line: what $GITHUB_OUTPUT and fromJSON() take.
            typer.echo(json.dumps({"include": include}, sort_keys=True, separators=(",", ":")))
        elif fmt is MatrixFormat.json:
            print_json([plan_row(p) for p in plans])
        else:
            typer.echo(plans_table(plans))
            say(f"{matrix}: {len(loaded.cells)} cells, {len(plans)} images")


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

    with guard():
        loaded = load_matrix(matrix)
        for warning in loaded.warnings:
            say(f"warning: {warning.format()}")
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
            say(finding.format())
        linted = len(loaded.plans) * len(variants)
        if json_out:
            print_json(
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
        say(
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
    wheelhouse: WheelhouseOption = None,
    ca_cert: CaCertOption = None,
    no_ca_cert: NoCaCertOption = False,
    pip_index_url: PipIndexOption = None,
    extra_index_url: ExtraIndexOption = None,
    buildkit: Annotated[bool, typer.Option(help="Render BuildKit syntax (cache, secrets).")] = (
        False
    ),
    created: CreatedOption = None,
    revision: RevisionOption = None,
    base_override: BaseOverrideOption = None,
    check: Annotated[
        bool, typer.Option("--check", help="Compare with what --out holds; exit 1 if different.")
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Write a Dockerfile and build context per image (one folder each)."""
    from imagekit.context import compare_tree, render_tree
    from imagekit.matrix import load_matrix

    with guard():
        loaded = load_matrix(matrix)
        plans = loaded.select(only, flavour.value if flavour else None)
        options, inputs = render_inputs(
            wheelhouse,
            ca_cert,
            no_ca_cert,
            pip_index_url,
            extra_index_url,
            buildkit,
            created,
            revision,
            base_override,
        )
        if check:
            differences = compare_tree(plans, options, inputs, out)
            for line in differences:
                say(line)
            if differences:
                say(f"{out}: {len(differences)} differences; re-render with `make goldens`")
                raise typer.Exit(1)
            say(f"{out}: {len(plans)} images match a fresh render")
            return
        folders = render_tree(plans, options, inputs, out)
        if json_out:
            print_json([str(f) for f in folders])
        else:
            for folder in folders:
                typer.echo(str(folder))
        say(f"rendered {len(folders)} images into {out}")


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

    with guard():
        data = load_compat()
        if torch is not None and torch not in data.torch:
            raise InputError(
                f"torch {torch} is not a release imagekit knows",
                f"known releases: {', '.join(data.torch_versions())}",
            )
        releases = [torch] if torch else data.torch_versions()
        if json_out:
            print_json({t: data.torch[t].model_dump(mode="json") for t in releases})
            return
        header, rows = compat_rows(data, releases)
        typer.echo(table(header, rows))
        say("* experimental in PyTorch's release matrix; ~ inferred, checked at verify time")


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

    with guard():
        facts, reasons = explain_cell(load_compat(), torch, cuda, python, os_name)
        if json_out:
            print_json({"ok": not reasons, "facts": facts, "reasons": reasons})
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
        say(f"wrote {out}")


# tags and publish --------------------------------------------------------------


@app.command("tags")
def tags_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    registry: Annotated[str | None, typer.Option(help="Push to this registry instead.")] = None,
    json_out: JsonOption = False,
) -> None:
    """List every tag publish would push: versioned (immutable) and aliases (may move)."""
    from imagekit.matrix import load_matrix
    from imagekit.publish import retarget
    from imagekit.report import table

    with guard():
        plans = load_matrix(matrix).select(only, flavour.value if flavour else None)
        rows = []
        for plan in plans:
            repository = retarget(plan.repository, registry)
            rows.append([plan.name, f"{repository}:{plan.tag}", "versioned"])
            rows += [[plan.name, f"{repository}:{alias}", "alias"] for alias in plan.aliases]
        if json_out:
            print_json([{"image": r[0], "tag": r[1], "kind": r[2]} for r in rows])
        else:
            typer.echo(table(["IMAGE", "TAG", "KIND"], rows))
