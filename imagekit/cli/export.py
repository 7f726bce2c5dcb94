"""The export command: an image's root filesystem for HPC runtimes, without Docker."""

from __future__ import annotations

from imagekit.cli.common import app, say, show
from imagekit.cli.options import command
from imagekit.hpc.requests import ExportCommand


@command(app, "export", ExportCommand)
def export(request: ExportCommand) -> None:
    """Export the image; print the path written (stdout) and what it holds (stderr)."""
    from imagekit.adapters.engine import open_engine
    from imagekit.adapters.export import export_image

    exported = export_image(open_engine(), request.image, request.destination, request.format)
    say(exported.summary())
    show(request.json, exported.document(), str(exported.path))
