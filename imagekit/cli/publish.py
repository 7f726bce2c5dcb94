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
    PlatformOption,
    ResultsOption,
    app,
    dispatch,
    handles,
    note_leftovers,
    plain_view,
    print_json,
    say,
)
from imagekit.cli.requests import PublishCommand, Selection
from imagekit.errors import EngineError, PublishError


@app.command(
    "publish",
    help="Push the tags of images that passed verification (exit 6 if any is refused or fails)."
    "\n\nIn CI, --candidate ID pushes one pre-release tag per image after its first "
    "verification, and --from-candidate ID later promotes those candidates to the final tags "
    "inside the registry, once every verification passed.",
)
def publish_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    platform: PlatformOption = None,
    registry: Annotated[
        str | None, typer.Option(help="Push to this registry instead of the matrix's.")
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="Check everything, push nothing.")] = False,
    force: Annotated[
        bool, typer.Option(help="Publish despite the gate (recorded in the results).")
    ] = False,
    candidate: Annotated[
        str | None,
        typer.Option(
            help="Push only TAG-candidate-ID of each gated image, nothing else (CI, before "
            "the other jobs verify it)."
        ),
    ] = None,
    from_candidate: Annotated[
        str | None,
        typer.Option(
            help="Promote TAG-candidate-ID inside the registry: the same manifest under the "
            "versioned tag and the aliases, gated on records for the image it holds; no pull, "
            "no engine."
        ),
    ] = None,
    attempts: Annotated[int, typer.Option(min=1, max=10, help="Tries per tag.")] = 4,
    deadline_s: Annotated[
        float,
        typer.Option(min=1, help="Stop retrying the registry once this many seconds have passed."),
    ] = 300.0,
    backoff_s: Annotated[
        float, typer.Option(min=0, help="First retry delay; doubles each time.")
    ] = 2.0,
    results: ResultsOption = Path("results"),
    json_out: JsonOption = False,
    signing_key: Annotated[
        str | None,
        typer.Option(
            "--signing-key",
            envvar="IMAGEKIT_SIGNING_KEY",
            help="A cosign private key (its password in COSIGN_PASSWORD): sign each published "
            "digest and attach the verify record and the SBOM as attestations.",
        ),
    ] = None,
) -> None:
    """Push the tags of images that passed verification (exit 6 if any is refused or fails)."""
    selection = Selection(
        matrix,
        tuple(only or ()),
        flavour.value if flavour else None,
        platform.value if platform else None,
    )
    dispatch(
        lambda: PublishCommand(
            selection=selection,
            registry=registry,
            dry_run=dry_run,
            force=force,
            candidate=candidate,
            from_candidate=from_candidate,
            attempts=attempts,
            backoff_s=backoff_s,
            deadline_s=deadline_s,
            results=results,
            json=json_out,
            signing_key=signing_key,
        )
    )


@handles(PublishCommand)
def publish(request: PublishCommand) -> None:
    """Gate and push every selected image; exit 6 when one is refused or fails."""
    from imagekit.adapters.cosign import Cosign, check_key
    from imagekit.adapters.engine import DockerEngine, connect
    from imagekit.adapters.registry import HttpRegistry
    from imagekit.adapters.results import RunFolder, results_key, verify_evidence
    from imagekit.adapters.sbom import CycloneDx
    from imagekit.core.multiarch import image_groups
    from imagekit.core.ports import EngineInfo
    from imagekit.core.records import PublishStatus
    from imagekit.core.report import table
    from imagekit.orchestration.publish import PublishRun, PublishSettings

    matrix = request.selection.load()
    # The platforms of one image publish together, as one index under its tags.
    # CI candidates: each platform's job pushes its own; promotion joins them.
    groups = image_groups(
        request.selection.plans(matrix), matrix.plans, partial=bool(request.candidate)
    )
    RunFolder.check_writable(request.results)
    signer = None
    if request.signing_key and not request.dry_run:
        check_key("--signing-key", request.signing_key)
        signer = Cosign(request.signing_key, timeout_s=request.deadline_s)
    # A promotion happens inside the registry: it needs no engine at all.
    client = None if request.from_candidate else connect()
    engine = DockerEngine(client) if client is not None else None
    if client is not None:
        note_leftovers(client)
    run = RunFolder.create(request.results)
    facts = engine.info() if engine is not None else EngineInfo()
    run.write_run(
        "publish",
        facts,
        {"registry": request.registry, "force": request.force, "signed": signer is not None},
    )
    settings = PublishSettings(
        registry=request.registry,
        dry_run=request.dry_run,
        force=request.force,
        candidate=request.candidate,
        from_candidate=request.from_candidate,
    )
    registry = HttpRegistry(
        client,
        attempts=request.attempts,
        backoff_s=request.backoff_s,
        deadline_s=request.deadline_s,
    )
    evidence = verify_evidence(request.results, results_key())
    publisher = PublishRun(
        engine, registry, CycloneDx(), run, evidence, settings, plain_view(), signer=signer
    )
    done = publisher.publish(groups)
    if request.json:
        print_json({"run_id": run.run_id, "images": [r.to_json() for r in done]})
    else:
        rows = [
            [
                r.name,
                r.status + (" (forced)" if r.forced else ""),
                ", ".join(t.tag.rsplit(":", 1)[1] + "=" + t.status for t in r.tags),
                "; ".join(r.reasons)[:100],
            ]
            for r in done
        ]
        typer.echo(table(["IMAGE", "STATUS", "TAGS", "REASONS"], rows))
    say(f"results: {run.root / 'publish.json'}")
    bad = [r for r in done if not r.status.ok]
    if publisher.engine_errors:
        first = publisher.engine_errors[0]
        raise EngineError(
            f"{len(bad)} of {len(done)} images not published; the engine refused "
            f"{len(publisher.engine_errors)}: {first.message}",
            first.hint,
        )
    if bad:
        refused = any(r.status is PublishStatus.REFUSED for r in bad)
        raise PublishError(
            f"{len(bad)} of {len(done)} images not published: "
            + "; ".join(f"{r.name}: {r.status}" for r in bad),
            "verify them first (imagekit verify); the reasons are above"
            if refused
            else "the registry's reasons are above",
        )
