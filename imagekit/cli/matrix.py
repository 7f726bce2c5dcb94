"""Commands that work from the matrix alone: matrix, check, render, compat, schema, tags."""

from __future__ import annotations

import json
from collections import Counter
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
    PlatformOption,
    RevisionOption,
    WheelhouseOption,
    app,
    compat_app,
    dispatch,
    handles,
    print_json,
    say,
)
from imagekit.cli.requests import (
    CheckRequest,
    CompatRequest,
    ExplainRequest,
    MatrixRequest,
    RenderInputs,
    RenderRequest,
    SchemaRequest,
    Selection,
    TagsRequest,
    uv_platforms,
)
from imagekit.errors import InputError

# matrix ----------------------------------------------------------------------


@app.command("matrix")
def matrix_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    platform: PlatformOption = None,
    fmt: Annotated[MatrixFormat, typer.Option("--format", help="Output format.")] = (
        MatrixFormat.table
    ),
) -> None:
    """List the images the matrix expands to."""
    selection = Selection(
        matrix,
        tuple(only or ()),
        flavour.value if flavour else None,
        platform.value if platform else None,
    )
    dispatch(lambda: MatrixRequest(selection, fmt.value))


@handles(MatrixRequest)
def show_matrix(request: MatrixRequest) -> None:
    """Print the plans as a table, JSON, or a GitHub Actions matrix."""
    from imagekit.core.report import plan_row, plans_table

    github = request.format == MatrixFormat.github
    loaded = request.selection.load()
    plans = request.selection.plans(loaded, allow_empty=github)
    platforms = Counter((p.repository, p.tag) for p in loaded.plans)
    rows = [plan_row(p, platforms[(p.repository, p.tag)]) for p in plans]
    if github:
        # Compact, one line: what $GITHUB_OUTPUT and fromJSON() take.
        typer.echo(json.dumps({"include": rows}, sort_keys=True, separators=(",", ":")))
    elif request.format == MatrixFormat.json:
        print_json(rows)
    else:
        typer.echo(plans_table(plans))
        say(f"{request.selection.matrix}: {len(loaded.cells)} cells, {len(plans)} images")


# check -----------------------------------------------------------------------


@app.command("check")
def check_command(matrix: MatrixOption = Path("matrix.yaml"), json_out: JsonOption = False) -> None:
    """Validate the matrix and lint every rendered Dockerfile (exit 0 or 2)."""
    dispatch(lambda: CheckRequest(matrix, json_out))


@handles(CheckRequest)
def check(request: CheckRequest) -> None:
    """Validate the matrix, then lint the legacy and BuildKit render of every image."""
    from imagekit.adapters.lint import lint_plans

    loaded, findings, linted = lint_plans(request.matrix)
    for warning in loaded.warnings:
        say(f"warning: {warning.format()}")
    failing = [f for f in findings if f.fails]
    for finding in findings:
        say(finding.format())
    if request.json:
        print_json(
            {
                "matrix": str(request.matrix),
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
        f"{request.matrix}: ok: {len(loaded.cells)} cells, {len(loaded.plans)} images, "
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
    platform: PlatformOption = None,
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
    selection = Selection(
        matrix,
        tuple(only or ()),
        flavour.value if flavour else None,
        platform.value if platform else None,
    )
    inputs = RenderInputs.of(
        wheelhouse,
        ca_cert,
        no_ca_cert,
        pip_index_url,
        extra_index_url,
        created,
        revision,
        base_override,
    )
    dispatch(lambda: RenderRequest(selection, inputs, out, buildkit, check, json_out))


@handles(RenderRequest)
def render(request: RenderRequest) -> None:
    """Write the build contexts, or compare them with what `--out` holds."""
    from imagekit.core.context import compare_tree, render_tree

    plans = request.selection.plans()
    options, inputs = request.inputs.resolve(
        buildkit=request.buildkit, platforms=uv_platforms(plans)
    )
    if request.check:
        differences = compare_tree(plans, options, inputs, request.out)
        for line in differences:
            say(line)
        if differences:
            say(f"{request.out}: {len(differences)} differences; re-render with `make goldens`")
            raise typer.Exit(1)
        say(f"{request.out}: {len(plans)} images match a fresh render")
        return
    folders = render_tree(plans, options, inputs, request.out)
    if request.json:
        print_json([str(f) for f in folders])
    else:
        for folder in folders:
            typer.echo(str(folder))
    say(f"rendered {len(folders)} images into {request.out}")


# compat ----------------------------------------------------------------------


@compat_app.callback(invoke_without_command=True)
def compat_show(
    ctx: typer.Context,
    torch: Annotated[str | None, typer.Option(help="Show one release, e.g. 2.8.0.")] = None,
    json_out: JsonOption = False,
) -> None:
    """Show the compatibility table (or one release)."""
    if ctx.invoked_subcommand is None:
        dispatch(lambda: CompatRequest(torch, json_out))


@handles(CompatRequest)
def show_compat(request: CompatRequest) -> None:
    """The compatibility table of every release, or of one."""
    from imagekit.core.compat import load_compat
    from imagekit.core.report import compat_rows, table

    data = load_compat()
    if request.torch is not None and request.torch not in data.torch:
        raise InputError(
            f"torch {request.torch} is not a release imagekit knows",
            f"known releases: {', '.join(data.torch_versions())}",
        )
    releases = [request.torch] if request.torch else data.torch_versions()
    if request.json:
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
    dispatch(lambda: ExplainRequest(torch, cuda, python, os_name, json_out))


@handles(ExplainRequest)
def explain(request: ExplainRequest) -> None:
    """What one cell derives to, or every reason it cannot be built (exit 2)."""
    from imagekit.core.compat import load_compat
    from imagekit.core.report import explain_cell

    derived, reasons = explain_cell(
        load_compat(), request.torch, request.cuda, request.python, request.os
    )
    if request.json:
        print_json({"ok": not reasons, "facts": derived, "reasons": reasons})
    else:
        for key, value in derived.items():
            typer.echo(f"{key:<18} {value}")
    if reasons:
        raise InputError("cannot build this cell:\n  - " + "\n  - ".join(reasons))


# schema ----------------------------------------------------------------------


@app.command("schema")
def schema_command(
    out: Annotated[Path | None, typer.Option(help="Write to this file instead of stdout.")] = None,
    results: Annotated[
        bool, typer.Option("--results", help="The schema of a results record instead.")
    ] = False,
    attestation: Annotated[
        bool,
        typer.Option(
            "--attestation",
            help="The schema of the verify attestation's predicate "
            "(https://imagekit.dev/attestations/verify/v1) instead.",
        ),
    ] = False,
) -> None:
    """Print the JSON Schema of matrix.yaml (or of a results record, or of the verify
    attestation's predicate), for editors and CI."""
    dispatch(lambda: SchemaRequest(out, results, attestation))


@handles(SchemaRequest)
def schema(request: SchemaRequest) -> None:
    """Print or write a JSON Schema."""
    if request.results:
        from imagekit.core.records import results_schema_text

        text = results_schema_text()
    elif request.attestation:
        from imagekit.core.attest import predicate_schema_text

        text = predicate_schema_text()
    else:
        from imagekit.core.matrix_schema import json_schema

        text = json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
    if request.out is None:
        typer.echo(text, nl=False)
    else:
        request.out.write_text(text, encoding="utf-8")
        say(f"wrote {request.out}")


# tags ------------------------------------------------------------------------


@app.command("tags")
def tags_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    platform: PlatformOption = None,
    registry: Annotated[str | None, typer.Option(help="Push to this registry instead.")] = None,
    json_out: JsonOption = False,
) -> None:
    """List every tag publish would push: versioned (immutable) and aliases (may move)."""
    selection = Selection(
        matrix,
        tuple(only or ()),
        flavour.value if flavour else None,
        platform.value if platform else None,
    )
    dispatch(lambda: TagsRequest(selection, registry, json_out))


@handles(TagsRequest)
def tags(request: TagsRequest) -> None:
    """Every tag of every selected image."""
    from imagekit.core.multiarch import platform_tag
    from imagekit.core.plan import retarget
    from imagekit.core.report import table

    matrix = request.selection.load()
    platforms = Counter((p.repository, p.tag) for p in matrix.plans)
    rows = []
    listed: set[tuple[str, str]] = set()
    for plan in request.selection.plans(matrix):
        repository = retarget(plan.repository, request.registry)
        image = (plan.repository, plan.tag)
        if platforms[image] > 1:
            # One manifest per platform under its own tag; the image's tags name their index.
            rows.append(
                [plan.name, f"{repository}:{platform_tag(plan.tag, plan.platform)}", "platform"]
            )
        if image in listed:
            continue
        listed.add(image)
        rows.append([plan.name, f"{repository}:{plan.tag}", "versioned"])
        rows += [[plan.name, f"{repository}:{alias}", "alias"] for alias in plan.aliases]
    if request.json:
        print_json([{"image": r[0], "tag": r[1], "kind": r[2]} for r in rows])
    else:
        typer.echo(table(["IMAGE", "TAG", "KIND"], rows))
