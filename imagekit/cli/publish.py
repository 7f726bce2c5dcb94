"""The publish command: gated, immutable tags on a registry."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from imagekit.cli.common import (
    FlavourOption,
    JsonOption,
    MatrixOption,
    OnlyOption,
    ResultsOption,
    app,
    guard,
    plain_view,
    print_json,
    say,
)
from imagekit.errors import (
    PublishError,
)


@app.command("publish")
def publish_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    registry: Annotated[
        str | None, typer.Option(help="Push to this registry instead of the matrix's.")
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="Check everything, push nothing.")] = False,
    force: Annotated[
        bool, typer.Option(help="Publish despite the gate (recorded in the results).")
    ] = False,
    candidate: Annotated[
        str | None, typer.Option(help="Push only TAG-candidate-ID (CI, before GPU runs).")
    ] = None,
    from_candidate: Annotated[
        str | None, typer.Option(help="Pull TAG-candidate-ID and publish it (CI promotion).")
    ] = None,
    attempts: Annotated[int, typer.Option(min=1, max=10, help="Tries per tag.")] = 4,
    backoff_s: Annotated[float, typer.Option(help="First retry delay; doubles each time.")] = 2.0,
    results: ResultsOption = Path("results"),
    json_out: JsonOption = False,
) -> None:
    """Push the tags of images that passed verification (exit 6 if any is refused or fails)."""
    from imagekit.engine import connect, engine_info
    from imagekit.matrix import load_matrix
    from imagekit.publish import DRY_RUN, PUBLISHED, UNCHANGED, PublishRun, PublishSettings
    from imagekit.report import table
    from imagekit.results import RunFolder

    with guard():
        plans = load_matrix(matrix).select(only, flavour.value if flavour else None)
        client = connect()
        run = RunFolder.create(results)
        run.write_run("publish", engine_info(client), {"registry": registry, "force": force})
        settings = PublishSettings(
            results_dir=results,
            registry=registry,
            dry_run=dry_run,
            force=force,
            attempts=attempts,
            backoff_s=backoff_s,
        )
        publisher = PublishRun(client, settings, run, plain_view())
        done = [publisher.publish_one(plan) for plan in plans]
        if json_out:
            print_json({"run_id": run.run_id, "images": [r.__dict__ for r in done]})
        else:
            rows = [
                [
                    r.name,
                    r.status + (" (forced)" if r.forced else ""),
                    ", ".join(t["tag"].rsplit(":", 1)[1] + "=" + t["status"] for t in r.tags),
                    "; ".join(r.reasons)[:100],
                ]
                for r in done
            ]
            typer.echo(table(["IMAGE", "STATUS", "TAGS", "REASONS"], rows))
        say(f"results: {run.root / 'publish.json'}")
        bad = [r for r in done if r.status not in (PUBLISHED, UNCHANGED, DRY_RUN)]
        if bad:
            raise PublishError(
                f"{len(bad)} of {len(done)} images not published: "
                + "; ".join(f"{r.name}: {r.status}" for r in bad),
                "verify them first (imagekit verify), or see the reasons above",
            )
