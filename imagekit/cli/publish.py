"""The publish command: gated, immutable tags on a registry."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

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

if TYPE_CHECKING:
    from imagekit.core.ports import Engine, Signer
    from imagekit.core.publish import PublishSettings
    from imagekit.orchestration.publish import PublishPorts


RegistryOption = Annotated[
    str | None, typer.Option(help="Push to this registry instead of the matrix's.")
]
DryRunOption = Annotated[bool, typer.Option(help="Check everything, push nothing.")]
ForceOption = Annotated[
    bool, typer.Option(help="Publish despite the gate (recorded in the results).")
]
CandidateOption = Annotated[
    str | None,
    typer.Option(
        help="Push only TAG-candidate-ID of each gated image, nothing else (CI, before "
        "the other jobs verify it)."
    ),
]
FromCandidateOption = Annotated[
    str | None,
    typer.Option(
        help="Promote TAG-candidate-ID inside the registry: the same manifest under the "
        "versioned tag and the aliases, gated on records for the image it holds; no pull, "
        "no engine."
    ),
]
AttemptsOption = Annotated[int, typer.Option(min=1, max=10, help="Tries per tag.")]
DeadlineOption = Annotated[
    float,
    typer.Option(min=1, help="Stop retrying the registry once this many seconds have passed."),
]
BackoffOption = Annotated[float, typer.Option(min=0, help="First retry delay; doubles each time.")]
SigningKeyOption = Annotated[
    str | None,
    typer.Option(
        "--signing-key",
        envvar="IMAGEKIT_SIGNING_KEY",
        help="A cosign private key (its password in COSIGN_PASSWORD): sign each published "
        "digest and attach the verify record and the SBOM as attestations.",
    ),
]


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
    registry: RegistryOption = None,
    dry_run: DryRunOption = False,
    force: ForceOption = False,
    candidate: CandidateOption = None,
    from_candidate: FromCandidateOption = None,
    attempts: AttemptsOption = 4,
    deadline_s: DeadlineOption = 300.0,
    backoff_s: BackoffOption = 2.0,
    results: ResultsOption = Path("results"),
    json_out: JsonOption = False,
    signing_key: SigningKeyOption = None,
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
    """Gate and push every selected image; exit 6 when one is refused or fails (exit 3 when
    the engine refused something)."""
    from imagekit.adapters.results import RunFolder
    from imagekit.core.publish import publish_rows
    from imagekit.core.report import table
    from imagekit.orchestration.publish import publish_images

    settings = request.settings()
    matrix = request.selection.load()
    groups = settings.groups(request.selection.plans(matrix), matrix.plans)
    RunFolder.check_writable(request.results)
    ports, engine = _ports(request, settings)
    outcome = publish_images(settings, groups, ports, engine)
    if request.json:
        records = [r.to_json() for r in outcome.records]
        print_json({"run_id": ports.store.run_id, "images": records})
    else:
        typer.echo(table(["IMAGE", "STATUS", "TAGS", "REASONS"], publish_rows(outcome.records)))
    say(f"results: {ports.store.root / 'publish.json'}")
    if (error := outcome.failure()) is not None:
        raise error


def _ports(
    request: PublishCommand, settings: PublishSettings
) -> tuple[PublishPorts, Engine | None]:
    """The adapters the request's mode works through, and its engine (none for a promotion,
    which works inside the registry); the run folder made, its run.json written."""
    from imagekit.adapters.engine import DockerEngine, connect
    from imagekit.adapters.registry import HttpRegistry
    from imagekit.adapters.results import RunFolder, results_key, verify_evidence
    from imagekit.adapters.sbom import CycloneDx
    from imagekit.core.ports import EngineInfo
    from imagekit.orchestration.publish import PublishPorts

    signer = _signer(request)
    client = connect() if settings.mode.needs_engine else None
    engine = DockerEngine(client) if client is not None else None
    if client is not None:
        note_leftovers(client)
    run = RunFolder.create(request.results)
    about = {"registry": request.registry, "force": request.force, "signed": signer is not None}
    run.write_run("publish", engine.info() if engine is not None else EngineInfo(), about)
    registry = HttpRegistry(
        client,
        attempts=request.attempts,
        backoff_s=request.backoff_s,
        deadline_s=request.deadline_s,
    )
    evidence = verify_evidence(request.results, results_key())
    ports = PublishPorts(registry, run, evidence, plain_view(), CycloneDx(), signer)
    return ports, engine


def _signer(request: PublishCommand) -> Signer | None:
    """Cosign with the request's key, its key checked first; None without one (or on a dry
    run)."""
    from imagekit.adapters.cosign import Cosign, check_key

    if not request.signing:
        return None
    check_key("--signing-key", request.signing)
    return Cosign(request.signing, timeout_s=request.deadline_s)
