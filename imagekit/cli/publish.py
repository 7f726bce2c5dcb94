"""The publish command: gated, immutable tags on a registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from imagekit.cli.common import app, note_leftovers, plain_view, say, show
from imagekit.cli.options import command
from imagekit.publish.requests import PublishCommand

if TYPE_CHECKING:
    from imagekit.kernel.engine import Engine
    from imagekit.publish.ports import Signer
    from imagekit.publish.run import PublishPorts


@command(
    app,
    "publish",
    PublishCommand,
    help="Push the tags of images that passed verification (exit 6 if any is refused or fails)."
    "\n\nIn CI, --candidate ID pushes one pre-release tag per image after its first "
    "verification, and --from-candidate ID later promotes those candidates to the final tags "
    "inside the registry, once every verification passed.",
)
def publish(request: PublishCommand) -> None:
    """Gate and push every selected image; exit 6 when one is refused or fails (exit 3 when
    the engine refused something)."""
    from imagekit.adapters.results import RunFolder
    from imagekit.publish.decisions import publish_table
    from imagekit.publish.multiarch import image_groups
    from imagekit.publish.run import publish_images

    matrix, settings = request.selection.load(), request.settings
    selected = request.selection.plans(matrix)
    groups = image_groups(selected, matrix.plans, partial=settings.mode.partial)
    RunFolder.check_writable(request.results)
    ports, engine = _ports(request)
    outcome = publish_images(settings, groups, ports, engine)
    data = {"run_id": ports.store.run_id, "images": [r.to_json() for r in outcome.records]}
    show(request.json, data, publish_table(outcome.records))
    say(f"results: {ports.store.root / 'publish.json'}")
    if (error := outcome.failure()) is not None:
        raise error


def _ports(request: PublishCommand) -> tuple[PublishPorts, Engine | None]:
    """The adapters the request's mode works through, and its engine (none for a promotion,
    which works inside the registry); the run folder made, its run.json written."""
    from imagekit.adapters.engine import open_engine
    from imagekit.adapters.registry import HttpRegistry
    from imagekit.adapters.results import RunFacts, RunFolder, results_key, verify_evidence
    from imagekit.adapters.sbom import CycloneDx
    from imagekit.publish.run import PublishPorts

    settings, signer = request.settings, _signer(request)
    engine = open_engine() if settings.mode.needs_engine else None
    if engine is not None:
        note_leftovers(engine)
    about = RunFacts(registry=settings.registry, force=settings.force, signed=signer is not None)
    run = RunFolder.begin(request.results, "publish", engine.info() if engine else None, about)
    registry = HttpRegistry(
        engine,
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
