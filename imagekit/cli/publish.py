"""The publish command: gated, immutable tags on a registry."""

from __future__ import annotations

from imagekit.cli.common import app, note_leftovers, say, show
from imagekit.cli.options import command
from imagekit.publish.requests import PublishCommand


@command(app, "publish", PublishCommand)
def publish(request: PublishCommand) -> None:
    """Gate and push every selected image; exit 6 when one is refused or fails (exit 3 when
    the engine refused something)."""
    from imagekit.adapters.progress import PlainView
    from imagekit.adapters.publishing import publish_ports
    from imagekit.adapters.results import RunFolder
    from imagekit.publish.decisions import publish_table
    from imagekit.publish.multiarch import image_groups
    from imagekit.publish.run import publish_images

    matrix, settings = request.selection.load(), request.settings
    selected = request.selection.plans(matrix)
    groups = image_groups(selected, matrix.plans, partial=settings.mode.partial)
    RunFolder.check_writable(request.results)
    ports, engine = publish_ports(request, matrix, PlainView(), note_leftovers)
    outcome = publish_images(settings, groups, ports, engine)
    data = {"run_id": ports.store.run_id, "images": [r.to_json() for r in outcome.records]}
    show(request.json, data, publish_table(outcome.records))
    say(f"results: {ports.store.root / 'publish.json'}")
    if (error := outcome.failure()) is not None:
        raise error
