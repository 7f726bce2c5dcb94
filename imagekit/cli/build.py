"""Commands that make images: build, bake, base bootstrap, gc."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from imagekit.cli.common import (
    BaseOverrideOption,
    CaCertOption,
    CreatedOption,
    ExtraIndexOption,
    FlavourOption,
    JsonOption,
    MatrixOption,
    NoCaCertOption,
    OnlyOption,
    PipIndexOption,
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
from imagekit.errors import BuildFailedError, EngineUnavailableError, InputError

# build -----------------------------------------------------------------------


class BuilderChoice(StrEnum):
    sdk = "sdk"
    buildx = "buildx"
    auto = "auto"


class Compression(StrEnum):
    gzip = "gzip"
    zstd = "zstd"


class BuildNetwork(StrEnum):
    default = "default"
    none = "none"


@app.command("build")
def build_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    platform: PlatformOption = None,
    builder: Annotated[
        BuilderChoice,
        typer.Option(help="sdk: Docker SDK; buildx: BuildKit; auto: buildx if present."),
    ] = BuilderChoice.sdk,
    jobs: Annotated[int, typer.Option(min=1, max=32, help="Images built at once.")] = 1,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Rebuild every step.")] = False,
    fail_fast: Annotated[bool, typer.Option(help="Stop at the first failed image.")] = False,
    pull: Annotated[
        bool, typer.Option(help="Pull a base image the engine lacks (needs a registry).")
    ] = False,
    wheelhouse: WheelhouseOption = None,
    ca_cert: CaCertOption = None,
    no_ca_cert: NoCaCertOption = False,
    pip_index_url: PipIndexOption = None,
    extra_index_url: ExtraIndexOption = None,
    created: CreatedOption = None,
    revision: RevisionOption = None,
    base_override: BaseOverrideOption = None,
    label: Annotated[
        list[str] | None, typer.Option(help="Extra label KEY=VALUE on every image (repeatable).")
    ] = None,
    results: ResultsOption = Path("results"),
    json_out: JsonOption = False,
    cache_from: Annotated[
        str | None,
        typer.Option(
            metavar="REPOSITORY",
            help="BuildKit: reuse the build cache kept in this registry repository.",
        ),
    ] = None,
    cache_to: Annotated[
        str | None,
        typer.Option(
            metavar="REPOSITORY",
            help="BuildKit: save the build cache (every stage) to this registry repository.",
        ),
    ] = None,
    compression: Annotated[
        Compression | None,
        typer.Option(
            help="Force every layer to this compression (BuildKit, containerd store). "
            "Default: new layers gzip, reused ones as they are."
        ),
    ] = None,
    network: Annotated[
        BuildNetwork,
        typer.Option(help="The RUN steps' network; none: prove the build needs none."),
    ] = BuildNetwork.default,
) -> None:
    """Build the images of the matrix (slim before full), skipping those up to date."""
    selection = Selection(
        matrix,
        tuple(only or ()),
        flavour.value if flavour else None,
        platform.value if platform else None,
    )
    inputs = RenderInputs.of(
        wheelhouse,
        ca_cert,
        no_ca_cert,
        pip_index_url,
        extra_index_url,
        created,
        revision,
        base_override,
    )
    dispatch(
        lambda: BuildCommand(
            selection=selection,
            inputs=inputs,
            builder=builder.value,
            jobs=jobs,
            no_cache=no_cache,
            fail_fast=fail_fast,
            pull=pull,
            labels=pairs("--label", tuple(label or ()), "team=ml"),
            results=results,
            json=json_out,
            cache_from=cache_from,
            cache_to=cache_to,
            compression=compression.value if compression else None,
            network=None if network is BuildNetwork.default else network.value,
        )
    )


@handles(BuildCommand)
def build(request: BuildCommand) -> None:
    """Build the selected images and print the outcome of each."""
    from imagekit.adapters.builders import (
        BuildxBuilder,
        SdkBuilder,
        buildx_available,
        buildx_driver,
    )
    from imagekit.adapters.engine import DockerEngine, connect
    from imagekit.adapters.results import RunFolder
    from imagekit.core.build_features import buildkit_refusal
    from imagekit.core.report import build_table
    from imagekit.orchestration.build import BuildRun, BuildSettings

    plans = request.selection.plans()
    # Bad inputs are reported before the engine is asked anything (checked again below if the
    # engine rules BuildKit out).
    guess = request.builder == "buildx" or (request.builder == "auto" and buildx_available())
    platforms = uv_platforms(plans)
    options, inputs = request.inputs.resolve(buildkit=guess, platforms=platforms)
    RunFolder.check_writable(request.results)
    engine = DockerEngine(connect())
    facts = engine.info()
    if request.builder == "buildx":
        if not facts.has_buildkit:
            raise EngineUnavailableError(
                f"{facts.describe()}: its Docker API has no BuildKit, so buildx cannot use it",
                "use --builder sdk (or auto, which picks it on this engine)",
            )
        if not buildx_available():
            raise EngineUnavailableError(
                "the docker buildx plugin is not installed", "use --builder sdk, or `make engine`"
            )
    # auto: BuildKit where the engine has it and the plugin is there; the SDK builder otherwise
    # (Podman: buildx would try to pull a BuildKit image and fail).
    use_buildx = request.builder == "buildx" or (
        request.builder == "auto" and facts.has_buildkit and buildx_available()
    )
    if use_buildx != guess:
        options, inputs = request.inputs.resolve(buildkit=use_buildx, platforms=platforms)
    wants = request.buildkit_features()
    refusal = buildkit_refusal(
        wants,
        cache_to=bool(request.cache_to),
        compression=bool(request.compression),
        use_buildx=use_buildx,
        driver=buildx_driver() if use_buildx and wants else "",  # asked only when it matters
        image_store=facts.image_store,
        engine=facts.describe(),
    )
    if refusal is not None:
        raise EngineUnavailableError(refusal.message, refusal.hint)
    note_leftovers(engine.client)
    run = RunFolder.create(request.results)
    run.write_run("build", engine.info(), {"matrix": str(request.selection.matrix)})
    settings = BuildSettings(
        options=options,
        inputs=inputs,
        contexts_dir=run.root / "contexts",
        jobs=request.jobs,
        no_cache=request.no_cache,
        fail_fast=request.fail_fast,
        pull=request.pull,
        extra_labels=request.labels,
        cache_from=request.cache_from,
        cache_to=request.cache_to,
        compression=request.compression,
        network=request.network,
    )
    chosen = BuildxBuilder() if use_buildx else SdkBuilder(engine.client)
    with event_view() as view:
        outcome = BuildRun(engine, chosen, plans, settings, run, view).execute()
    if request.json:
        print_json({"run_id": run.run_id, "results": [asdict(r) for r in outcome]})
    else:
        typer.echo(build_table(outcome))
    say(f"results: {run.root}")
    failed = [r for r in outcome if not r.ok]
    if failed:
        raise BuildFailedError(
            f"{len(failed)} of {len(outcome)} images failed or were skipped",
            f"full logs: {run.root / 'logs'}",
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
    selection = Selection(
        matrix,
        tuple(only or ()),
        flavour.value if flavour else None,
        platform.value if platform else None,
    )
    inputs = RenderInputs.of(
        wheelhouse,
        ca_cert,
        no_ca_cert,
        pip_index_url,
        extra_index_url,
        created,
        revision,
        base_override,
    )
    dispatch(lambda: BakeRequest(selection, inputs, out, contexts))


@handles(BakeRequest)
def bake(request: BakeRequest) -> None:
    """Render every selected image for BuildKit and write the bake file."""
    from imagekit.core.bake import bake_file
    from imagekit.core.context import write_context
    from imagekit.core.render import render_image

    plans = request.selection.plans()
    options, inputs = request.inputs.resolve(buildkit=True, platforms=uv_platforms(plans))
    images = []
    for plan in plans:
        rendered = render_image(plan, options)
        folder = write_context(rendered, request.contexts.resolve(), inputs)
        images.append((rendered, folder.resolve()))
    data = bake_file(images, inputs.ca_bundle.resolve() if inputs.ca_bundle else None)
    request.out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    out = request.out
    say(f"wrote {out}: {len(images)} targets; build with `docker buildx bake -f {out}`")


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
    from imagekit.core.plan import IMAGE_REF_RE

    if not IMAGE_REF_RE.match(request.tag) or ":" not in request.tag.rsplit("/", 1)[-1]:
        raise InputError(
            f"--tag {request.tag!r} is not NAME:TAG", "e.g. imagekit-base/debian:bookworm"
        )
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
