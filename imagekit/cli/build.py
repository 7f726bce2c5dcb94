"""Commands that make images: build, bake, base bootstrap, gc."""

from __future__ import annotations

import json
import os
from contextlib import AbstractContextManager
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import typer

from imagekit.cli.common import (
    app,
    event_view,
    note_leftovers,
    print_json,
    rendering,
    say,
)
from imagekit.cli.options import command
from imagekit.core.requests import (
    BakeRequest,
    BootstrapCommand,
    BuildCommand,
    GcRequest,
)
from imagekit.errors import BuildFailedError

if TYPE_CHECKING:  # imported lazily: the adapters load docker
    from imagekit.adapters.engine import DockerEngine
    from imagekit.core.context import ContextInputs
    from imagekit.core.plan import ImagePlan
    from imagekit.core.ports import Builder, Engine, RunStore
    from imagekit.core.render import RenderOptions
    from imagekit.events import EventSink


class _DockerTools:
    """`build_images`'s world for one request (`BuildTools` says what each method does):
    Docker, buildx, the results folder, the terminal. An adapter's function is looked up in
    its module when it is called, so that tests can replace it by name."""

    def __init__(self, request: BuildCommand, plans: list[ImagePlan]) -> None:
        from imagekit.adapters import builders, engine, results

        self.request, self.plans = request, plans
        self.builders, self.docker, self.results = builders, engine, results
        self.engine: DockerEngine | None = None

    def render(self, buildkit: bool) -> tuple[RenderOptions, ContextInputs]:
        return rendering(self.request.inputs, self.plans, buildkit=buildkit)

    def buildx_available(self) -> bool:
        return self.builders.buildx_available()

    def buildx_driver(self) -> str:
        return self.builders.buildx_driver()

    def check_results(self) -> None:
        self.results.RunFolder.check_writable(self.request.results)

    def connect(self) -> Engine:
        self.engine = self.docker.DockerEngine(self.docker.connect())
        return self.engine

    def builder(self, buildkit: bool) -> Builder:
        assert self.engine is not None
        if buildkit:
            return self.builders.BuildxBuilder()
        return self.builders.SdkBuilder(self.engine.client)

    def tidy(self) -> None:
        assert self.engine is not None
        note_leftovers(self.engine.client)

    def open_run(self) -> RunStore:
        assert self.engine is not None
        run = self.results.RunFolder.create(self.request.results)
        run.write_run("build", self.engine.info(), {"matrix": str(self.request.selection.matrix)})
        return run

    def view(self) -> AbstractContextManager[EventSink]:
        return event_view()


@command(app, "build", BuildCommand)
def build(request: BuildCommand) -> None:
    """Build the selected images and print the outcome of each."""
    from imagekit.core.report import build_table
    from imagekit.orchestration.build import build_images

    plans = request.selection.plans()
    tools = _DockerTools(request, plans)
    report = build_images(plans, request, tools)
    if request.json:
        print_json({"run_id": report.run_id, "results": [r.to_json() for r in report.results]})
    else:
        typer.echo(build_table(report.results))
    say(f"results: {report.root}")
    if report.failed:
        raise BuildFailedError(
            f"{len(report.failed)} of {len(report.results)} images failed or were skipped",
            f"full logs: {report.root / 'logs'}",
        )


@command(app, "bake", BakeRequest)
def bake(request: BakeRequest) -> None:
    """Render every selected image for BuildKit and write the bake file."""
    from imagekit.orchestration.bake import bake_contexts

    plans = request.selection.plans()
    options, inputs = rendering(request.inputs, plans, buildkit=True)
    data = bake_contexts(plans, options, inputs, request.contexts)
    request.out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    out, count = request.out, len(plans)
    say(f"wrote {out}: {count} targets; build with `docker buildx bake -f {out}`")


# base ------------------------------------------------------------------------

base_app = typer.Typer(help="Base images without a registry.", no_args_is_help=True)
app.add_typer(base_app, name="base")


def _bootstrap_request(arch: str | None, **options: Any) -> BootstrapCommand:
    """The request, its architecture this machine's unless given, SOURCE_DATE_EPOCH read."""
    epoch = BootstrapCommand.epoch_from(os.environ)
    return BootstrapCommand(**options, arch=arch or _host_arch(), source_date_epoch=epoch)


def _host_arch() -> str:
    from imagekit.adapters.baseimage import host_arch

    return host_arch() or "amd64"


@command(base_app, "bootstrap", BootstrapCommand, _bootstrap_request)
def bootstrap(request: BootstrapCommand) -> None:
    """Bootstrap the base and load it into the engine; prints its image id."""
    from imagekit.adapters.baseimage import BootstrapRequest
    from imagekit.adapters.baseimage import bootstrap as make_base
    from imagekit.adapters.engine import connect

    client = connect()
    native = request.arch == _host_arch()
    took = "about a minute" if native else "several minutes: emulated"
    say(f"bootstrapping {request.suite} {request.arch} into {request.tag} ({took})")
    image_id = make_base(client, BootstrapRequest(**asdict(request)))
    typer.echo(image_id)
    say(f"{request.tag} is {image_id}")


@command(app, "gc", GcRequest)
def gc(request: GcRequest) -> None:
    """List or remove what imagekit left behind."""
    from imagekit.adapters.engine import age_s, connect, leftovers, remove

    client = connect()
    found = [x for x in leftovers(client, request.run_id) if age_s(x) >= request.older_than_s]
    failed = 0
    for item in found:
        why = None if request.dry_run else remove(client, item)
        verb = "would remove" if request.dry_run else ("removed" if why is None else "kept")
        failed += why is not None
        typer.echo(
            f"{verb} {item.kind} {item.id.removeprefix('sha256:')[:12]} {item.name}"
            + (f" ({why})" if why else "")
        )
    done = "listed" if request.dry_run else "removed"
    say(f"{len(found) - failed} of {len(found)} leftovers {done}")
