"""Commands that work from the matrix alone: matrix, check, render, compat, schema, tags."""

from __future__ import annotations

import typer

from imagekit.build.inputs import RenderRequest
from imagekit.cli.common import app, compat_app, matrix_app, print_json, say, show
from imagekit.cli.options import command
from imagekit.errors import InputError
from imagekit.matrix.requests import (
    CheckRequest,
    CompatRequest,
    ExplainRequest,
    MatrixFormat,
    MatrixRequest,
    SchemaRequest,
    TagsRequest,
)
from imagekit.upstream.requests import CompatVerifyRequest, RefreshRequest


@command(matrix_app, "matrix", MatrixRequest, callback=True)
def show_matrix(request: MatrixRequest) -> None:
    """Print the plans as a table, JSON, or a GitHub Actions matrix."""
    from imagekit.matrix.report import plans_output

    loaded = request.selection.load()
    plans = request.selection.plans(loaded, allow_empty=request.format == MatrixFormat.github)
    typer.echo(plans_output(request.format, plans, loaded.plans))
    if request.format == MatrixFormat.table:
        say(f"{request.selection.matrix}: {len(loaded.cells)} cells, {len(plans)} images")


@command(app, "check", CheckRequest)
def check(request: CheckRequest) -> None:
    """Validate the matrix, then lint the legacy and BuildKit render of every image."""
    from imagekit.adapters.lint import lint_plans
    from imagekit.matrix.report import check_document, check_lines, check_passed, lint_refusal

    loaded, findings, linted = lint_plans(request.matrix)
    for line in check_lines(loaded, findings):
        say(line)
    if request.json:
        print_json(check_document(str(request.matrix), loaded, findings, linted))
    if (error := lint_refusal(sum(f.fails for f in findings))) is not None:
        raise error
    say(check_passed(str(request.matrix), loaded, linted))


@command(app, "render", RenderRequest)
def render(request: RenderRequest) -> None:
    """Write the build contexts, or compare them with what `--out` holds."""
    from imagekit.adapters.contexts import check_tree, render_tree
    from imagekit.adapters.installer import rendering

    plans = request.selection.plans()
    options, inputs = rendering(request.inputs, plans, buildkit=request.buildkit)
    if request.check:
        lines, same = check_tree(plans, options, inputs, request.out)
        say("\n".join(lines))
        if not same:
            raise typer.Exit(1)
        return
    folders = render_tree(plans, options, inputs, request.out)
    show(request.json, [str(f) for f in folders], "\n".join(str(f) for f in folders))
    say(f"rendered {len(folders)} images into {request.out}")


@command(compat_app, "compat", CompatRequest, callback=True)
def show_compat(request: CompatRequest) -> None:
    """The compatibility table of every release, or of one."""
    from imagekit.matrix.compat import load_compat
    from imagekit.matrix.report import compat_output

    data = load_compat()
    releases = [data.require(request.torch)] if request.torch else data.torch_versions()
    typer.echo(compat_output(data, releases, request.json))
    if not request.json:
        say("* experimental in PyTorch's release matrix; ~ inferred, checked at verify time")


@command(compat_app, "explain", ExplainRequest)
def explain(request: ExplainRequest) -> None:
    """What one cell derives to, or every reason it cannot be built (exit 2)."""
    from imagekit.matrix.compat import load_compat
    from imagekit.matrix.report import explain_cell

    derived, reasons = explain_cell(
        load_compat(), request.torch, request.cuda, request.python, request.os
    )
    lines = "\n".join(f"{key:<18} {value}" for key, value in derived.items())
    show(request.json, {"ok": not reasons, "facts": derived, "reasons": reasons}, lines)
    if reasons:
        raise InputError("cannot build this cell:\n  - " + "\n  - ".join(reasons))


@command(matrix_app, "refresh", RefreshRequest)
def refresh(request: RefreshRequest) -> None:
    """Propose (or, with --write, make) the matrix.yaml and compat.yaml lines of the releases
    the indexes hold that the matrix lacks; exit 2, writing nothing, on bad input."""
    from imagekit.adapters.package_index import HttpPackageIndex, refresh_sources, write_files
    from imagekit.upstream.run import refresh_matrix

    matrix, compat = refresh_sources(request.matrix, request.compat)
    proposal = refresh_matrix(HttpPackageIndex(), request.index_urls, matrix, compat, request.since)
    show(request.json, proposal.document(), proposal.text())
    if request.write:
        write_files(proposal.changed)
        say(f"wrote {', '.join(f for f, _ in proposal.changed) or 'nothing: nothing changed'}")


@command(compat_app, "verify", CompatVerifyRequest)
def verify_compat(request: CompatVerifyRequest) -> None:
    """Check the compatibility data against the torch wheels on hand (exit 2 if it disagrees)."""
    from imagekit.adapters.package_index import LocalWheelhouse, compat_source
    from imagekit.errors import ValidationError
    from imagekit.upstream.run import verify_compat

    compat = compat_source(request.compat)
    checked = verify_compat(LocalWheelhouse(), request.wheelhouses, compat)
    typer.echo("\n".join((*checked.confirmed, *checked.skipped)))
    if checked.problems:
        raise ValidationError(list(checked.problems), "the wheel's METADATA wins")


@command(app, "schema", SchemaRequest)
def schema(request: SchemaRequest) -> None:
    """Print or write a JSON Schema: of matrix.yaml, of a results record (--results), or of
    the verify attestation's predicate (--attestation)."""
    from imagekit.publish.schemas import schema_text

    text = schema_text(request.results, request.attestation)
    if request.out is None:
        typer.echo(text, nl=False)
    else:
        request.out.write_text(text, encoding="utf-8")
        say(f"wrote {request.out}")


@command(app, "tags", TagsRequest)
def tags(request: TagsRequest) -> None:
    """Every tag of every selected image."""
    from imagekit.kernel.text import table
    from imagekit.publish.tags import tag_document, tag_rows

    matrix = request.selection.load()
    rows = tag_rows(request.selection.plans(matrix), matrix.plans, request.registry)
    show(request.json, tag_document(rows), lambda: table(["IMAGE", "TAG", "KIND"], rows))
