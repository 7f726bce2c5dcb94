"""Commands that make images: build, bake, base bootstrap, gc."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import typer

from imagekit.build.reproducible import epoch_from
from imagekit.build.requests import (
    BakeRequest,
    BootstrapCommand,
    BuildCommand,
    BuildSettings,
    GcRequest,
)
from imagekit.cli.common import app, note_leftovers, say, show
from imagekit.cli.options import command
from imagekit.errors import BuildFailedError


def _build_request(settings: BuildSettings, **options: Any) -> BuildCommand:
    """The request, with SOURCE_DATE_EPOCH read (build/reproducible.py)."""
    epoch = epoch_from(os.environ)
    return BuildCommand(settings=replace(settings, source_date_epoch=epoch), **options)


@command(app, "build", BuildCommand, _build_request)
def build(request: BuildCommand) -> None:
    """Build the selected images and print the outcome of each."""
    from imagekit.adapters.build_tools import DockerBuildTools
    from imagekit.adapters.progress import event_view
    from imagekit.build.use_case import build_images
    from imagekit.kernel.text import build_table

    plans = request.selection.plans()
    terminal = (note_leftovers, event_view, say)
    tools = DockerBuildTools(
        plans, request.inputs, request.results, request.selection.matrix, *terminal
    )
    report = build_images(plans, request.settings, tools)
    data = {"run_id": report.run_id, "results": [r.to_json() for r in report.results]}
    show(request.json, data, build_table(report.results))
    say(f"results: {report.root}")
    if report.failed:
        raise BuildFailedError(
            f"{len(report.failed)} of {len(report.results)} images failed or were skipped",
            f"full logs: {report.root / 'logs'}",
        )


@command(app, "bake", BakeRequest)
def bake(request: BakeRequest) -> None:
    """Render every selected image for BuildKit and write the bake file."""
    from imagekit.adapters.contexts import ContextFolder
    from imagekit.adapters.installer import rendering
    from imagekit.adapters.maybe_engine import bake_epochs
    from imagekit.adapters.results import write_json
    from imagekit.build.bake_run import bake_contexts

    plans = request.selection.plans()
    options, inputs = rendering(request.inputs, plans, buildkit=True)
    baked = bake_contexts(plans, options, inputs, ContextFolder(request.contexts), *bake_epochs())
    write_json(request.out, baked.file)
    say("\n".join(baked.lines(request.out)))


# base ------------------------------------------------------------------------

base_app = typer.Typer(help="Base images without a registry.", no_args_is_help=True)
app.add_typer(base_app, name="base")


def _bootstrap_request(arch: str | None, **options: Any) -> BootstrapCommand:
    """The request, its architecture this machine's unless given, SOURCE_DATE_EPOCH read."""
    from imagekit.adapters.baseimage import default_arch

    epoch = epoch_from(os.environ)
    return BootstrapCommand(**options, arch=arch or default_arch(), source_date_epoch=epoch)


@command(base_app, "bootstrap", BootstrapCommand, _bootstrap_request)
def bootstrap(request: BootstrapCommand) -> None:
    """Bootstrap the base and load it into the engine; prints its image id."""
    from imagekit.adapters import baseimage
    from imagekit.adapters.engine import open_engine
    from imagekit.adapters.installer import base_cache

    engine, cache = open_engine(), base_cache()
    say(baseimage.starting_line(request))
    image_id = baseimage.bootstrap(engine, request, cache)
    typer.echo(image_id)
    say(baseimage.done_line(request, image_id, cache.reused))


@command(app, "gc", GcRequest)
def gc(request: GcRequest) -> None:
    """List or remove what imagekit left behind."""
    from imagekit.adapters.engine import open_engine
    from imagekit.adapters.leftovers import tidied_summary, tidy

    done = tidy(open_engine(), request.run_id, request.older_than_s, dry_run=request.dry_run)
    for tidied in done:
        typer.echo(tidied.line())
    say(tidied_summary(done, dry_run=request.dry_run))
