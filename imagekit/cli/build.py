"""Commands that make images: build, bake, base bootstrap, gc."""

from __future__ import annotations

import json
import os
from contextlib import AbstractContextManager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from imagekit.cli.common import (
    BaseOverrideOption,
    CaCertOption,
    CreatedOption,
    ExtraIndexOption,
    FlavourChoice,
    FlavourOption,
    JsonOption,
    MatrixOption,
    NoCaCertOption,
    OnlyOption,
    PipIndexOption,
    PlatformChoice,
    PlatformOption,
    ResultsOption,
    RevisionOption,
    WheelhouseOption,
    app,
    dispatch,
    event_view,
    handles,
    note_leftovers,
    print_json,
    say,
)
from imagekit.cli.requests import (
    BakeRequest,
    BootstrapCommand,
    BuildCommand,
    GcRequest,
    RenderInputs,
    Selection,
    duration_s,
    pairs,
    uv_platforms,
)
from imagekit.core.build_options import BuilderChoice, BuildNetwork, Compression
from imagekit.errors import BuildFailedError

if TYPE_CHECKING:  # imported lazily: the adapters load docker
    from imagekit.adapters.engine import DockerEngine
    from imagekit.core.context import ContextInputs
    from imagekit.core.plan import ImagePlan
    from imagekit.core.ports import Builder, Engine, RunStore
    from imagekit.core.render import RenderOptions
    from imagekit.events import EventSink

# build -----------------------------------------------------------------------


BuilderOption = Annotated[
    BuilderChoice,
    typer.Option(help="sdk: Docker SDK; buildx: BuildKit; auto: buildx if present."),
]
JobsOption = Annotated[int, typer.Option(min=1, max=32, help="Images built at once.")]
NoCacheOption = Annotated[bool, typer.Option("--no-cache", help="Rebuild every step.")]
FailFastOption = Annotated[bool, typer.Option(help="Stop at the first failed image.")]
PullOption = Annotated[
    bool, typer.Option(help="Pull a base image the engine lacks (needs a registry).")
]
LabelOption = Annotated[
    list[str] | None, typer.Option(help="Extra label KEY=VALUE on every image (repeatable).")
]
CacheFromOption = Annotated[
    str | None,
    typer.Option(
        metavar="REPOSITORY",
        help="BuildKit: reuse the build cache kept in this registry repository.",
    ),
]
CacheToOption = Annotated[
    str | None,
    typer.Option(
        metavar="REPOSITORY",
        help="BuildKit: save the build cache (every stage) to this registry repository.",
    ),
]
CompressionOption = Annotated[
    Compression | None,
    typer.Option(
        help="Force every layer to this compression (BuildKit, containerd store). "
        "Default: new layers gzip, reused ones as they are."
    ),
]
NetworkOption = Annotated[
    BuildNetwork,
    typer.Option(help="The RUN steps' network; none: prove the build needs none."),
]


@app.command("build")
def build_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    platform: PlatformOption = None,
    builder: BuilderOption = BuilderChoice.SDK,
    jobs: JobsOption = 1,
    no_cache: NoCacheOption = False,
    fail_fast: FailFastOption = False,
    pull: PullOption = False,
    wheelhouse: WheelhouseOption = None,
    ca_cert: CaCertOption = None,
    no_ca_cert: NoCaCertOption = False,
    pip_index_url: PipIndexOption = None,
    extra_index_url: ExtraIndexOption = None,
    created: CreatedOption = None,
    revision: RevisionOption = None,
    base_override: BaseOverrideOption = None,
    label: LabelOption = None,
    results: ResultsOption = Path("results"),
    json_out: JsonOption = False,
    cache_from: CacheFromOption = None,
    cache_to: CacheToOption = None,
    compression: CompressionOption = None,
    network: NetworkOption = BuildNetwork.DEFAULT,
) -> None:
    """Build the images of the matrix (slim before full), skipping those up to date."""
    selection = _selection(matrix, only, flavour, platform)
    inputs = RenderInputs.of(
        wheelhouse, ca_cert, no_ca_cert, pip_index_url, extra_index_url, created, revision,
        base_override,
    )  # fmt: skip
    dispatch(
        lambda: BuildCommand(
            selection=selection,
            inputs=inputs,
            builder=builder,
            jobs=jobs,
            no_cache=no_cache,
            fail_fast=fail_fast,
            pull=pull,
            labels=pairs("--label", tuple(label or ()), "team=ml"),
            results=results,
            json=json_out,
            cache_from=cache_from,
            cache_to=cache_to,
            compression=compression,
            network=network,
        )
    )


def _selection(
    matrix: Path,
    only: list[str] | None,
    flavour: FlavourChoice | None,
    platform: PlatformChoice | None,
) -> Selection:
    """`--matrix`, `--only`, `--flavour` and `--platform` as a selection."""
    return Selection(
        matrix,
        tuple(only or ()),
        flavour.value if flavour else None,
        platform.value if platform else None,
    )


class _DockerTools:
    """`build_images`'s world for one request (`BuildTools` says what each method does):
    Docker, buildx, the results folder, the terminal. An adapter's function is looked up in
    its module when it is called, so that tests can replace it by name."""

    def __init__(self, request: BuildCommand, plans: list[ImagePlan]) -> None:
        from imagekit.adapters import builders, engine, results

        self.request, self.platforms = request, uv_platforms(plans)
        self.builders, self.docker, self.results = builders, engine, results
        self.engine: DockerEngine | None = None

    def render(self, buildkit: bool) -> tuple[RenderOptions, ContextInputs]:
        return self.request.inputs.resolve(buildkit=buildkit, platforms=self.platforms)

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


@handles(BuildCommand)
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


# bake ------------------------------------------------------------------------


@app.command("bake")
def bake_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    out: Annotated[Path, typer.Option(help="Where to write the bake file.")] = Path(
        "docker-bake.json"
    ),
    contexts: Annotated[Path, typer.Option(help="Folder for the build contexts.")] = Path(
        "out/bake"
    ),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    platform: PlatformOption = None,
    wheelhouse: WheelhouseOption = None,
    ca_cert: CaCertOption = None,
    no_ca_cert: NoCaCertOption = False,
    pip_index_url: PipIndexOption = None,
    extra_index_url: ExtraIndexOption = None,
    created: CreatedOption = None,
    revision: RevisionOption = None,
    base_override: BaseOverrideOption = None,
) -> None:
    """Write docker-bake.json for the plan (build it with `docker buildx bake -f FILE`)."""
    selection = _selection(matrix, only, flavour, platform)
    inputs = RenderInputs.of(
        wheelhouse, ca_cert, no_ca_cert, pip_index_url, extra_index_url, created, revision,
        base_override,
    )  # fmt: skip
    dispatch(lambda: BakeRequest(selection, inputs, out, contexts))


@handles(BakeRequest)
def bake(request: BakeRequest) -> None:
    """Render every selected image for BuildKit and write the bake file."""
    from imagekit.orchestration.bake import bake_contexts

    plans = request.selection.plans()
    options, inputs = request.inputs.resolve(buildkit=True, platforms=uv_platforms(plans))
    data = bake_contexts(plans, options, inputs, request.contexts)
    request.out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    out, count = request.out, len(plans)
    say(f"wrote {out}: {count} targets; build with `docker buildx bake -f {out}`")


# base ------------------------------------------------------------------------

base_app = typer.Typer(help="Base images without a registry.", no_args_is_help=True)
app.add_typer(base_app, name="base")


@base_app.command("bootstrap")
def base_bootstrap_command(
    suite: Annotated[str, typer.Option(help="Debian or Ubuntu suite, e.g. bookworm, noble.")],
    tag: Annotated[
        str, typer.Option(help="Image name:tag to create, e.g. imagekit-base/debian:bookworm.")
    ],
    mirror: Annotated[
        str | None, typer.Option(help="Package mirror (a snapshot mirror makes it reproducible).")
    ] = None,
    include: Annotated[
        str, typer.Option(help="Comma-separated packages to add.")
    ] = "python3,python3-venv,ca-certificates",
    variant: Annotated[str, typer.Option(help="mmdebstrap variant.")] = "minbase",
    docs: Annotated[
        bool,
        typer.Option(help="Keep manuals, translations and package docs (as -slim images do not)."),
    ] = False,
    arch: Annotated[
        str | None,
        typer.Option(
            help="Debian architecture: amd64 or arm64 (one other than this machine's runs "
            "through qemu-user-static). Default: this machine's."
        ),
    ] = None,
) -> None:
    """Make a minimal base image with Python from distribution packages (needs mmdebstrap)."""
    dispatch(
        lambda: BootstrapCommand(
            suite=suite,
            tag=tag,
            mirror=mirror,
            include=tuple(p for p in include.split(",") if p),
            variant=variant,
            docs=docs,
            source_date_epoch=BootstrapCommand.epoch_from(os.environ),
            arch=arch or _host_arch(),
        )
    )


def _host_arch() -> str:
    from imagekit.adapters.baseimage import host_arch

    return host_arch() or "amd64"


@handles(BootstrapCommand)
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


# gc --------------------------------------------------------------------------


@app.command("gc")
def gc_command(
    older_than: Annotated[
        str, typer.Option(help="Only what is older than this: 30s, 10m, 2h, 1d.")
    ] = "0s",
    dry_run: Annotated[bool, typer.Option(help="List, remove nothing.")] = False,
    run_id: Annotated[
        str | None,
        typer.Option(help="Only the containers of this run (its io.imagekit.run-id label)."),
    ] = None,
) -> None:
    """Remove containers and dangling build-stage images that imagekit left behind.

    Dangling build stages are also the classic builder's layer cache: without them the next
    build of those images starts cold."""
    dispatch(lambda: GcRequest(duration_s("--older-than", older_than), dry_run, run_id))


@handles(GcRequest)
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
