"""Commands that make images: build, bake, base bootstrap, gc."""

from __future__ import annotations

import json
import os
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
    ResultsOption,
    RevisionOption,
    WheelhouseOption,
    app,
    event_view,
    guard,
    print_json,
    render_inputs,
    say,
)
from imagekit.errors import (
    BuildFailedError,
    EngineUnavailableError,
    InputError,
)

# build -----------------------------------------------------------------------


class BuilderChoice(StrEnum):
    sdk = "sdk"
    buildx = "buildx"
    auto = "auto"


@app.command("build")
def build_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    builder: Annotated[
        BuilderChoice,
        typer.Option(help="sdk: Docker SDK; buildx: BuildKit; auto: buildx if present."),
    ] = BuilderChoice.sdk,
    jobs: Annotated[int, typer.Option(min=1, max=32, help="Images built at once.")] = 1,
    no_cache: Annotated[bool, typer.Option(help="Rebuild every step.")] = False,
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
) -> None:
    """Build the images of the matrix (slim before full), skipping those up to date."""
    from imagekit.build import BuildRun, BuildSettings
    from imagekit.builders import BuildxBuilder, SdkBuilder, buildx_available
    from imagekit.engine import connect, engine_info
    from imagekit.matrix import load_matrix
    from imagekit.report import build_table
    from imagekit.results import RunFolder

    with guard():
        loaded = load_matrix(matrix)
        plans = loaded.select(only, flavour.value if flavour else None)
        use_buildx = builder is BuilderChoice.buildx or (
            builder is BuilderChoice.auto and buildx_available()
        )
        options, inputs = render_inputs(
            wheelhouse,
            ca_cert,
            no_ca_cert,
            pip_index_url,
            extra_index_url,
            use_buildx,
            created,
            revision,
            base_override,
        )
        extra_labels = _labels(label)
        client = connect()
        if builder is BuilderChoice.buildx and not buildx_available():
            raise EngineUnavailableError(
                "the docker buildx plugin is not installed", "use --builder sdk, or `make engine`"
            )
        run = RunFolder.create(results)
        run.write_run("build", engine_info(client), {"matrix": str(matrix)})
        settings = BuildSettings(
            options=options,
            inputs=inputs,
            contexts_dir=run.root / "contexts",
            jobs=jobs,
            no_cache=no_cache,
            fail_fast=fail_fast,
            pull=pull,
            extra_labels=tuple(extra_labels.items()),
        )
        chosen = BuildxBuilder() if use_buildx else SdkBuilder(client)
        with event_view() as view:
            outcome = BuildRun(client, chosen, plans, settings, run, view).execute()
        if json_out:
            print_json({"run_id": run.run_id, "results": [r.__dict__ for r in outcome]})
        else:
            typer.echo(build_table(outcome))
        say(f"results: {run.root}")
        failed = [r for r in outcome if not r.ok]
        if failed:
            raise BuildFailedError(
                f"{len(failed)} of {len(outcome)} images failed or were skipped",
                f"full logs: {run.root / 'logs'}",
            )


def _labels(items: list[str] | None) -> dict[str, str]:
    labels = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"--label {item!r} is not KEY=VALUE")
        labels[key] = value
    return labels


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
    from imagekit.bake import bake_file
    from imagekit.context import write_context
    from imagekit.matrix import load_matrix
    from imagekit.render import render_image

    with guard():
        loaded = load_matrix(matrix)
        plans = loaded.select(only, flavour.value if flavour else None)
        options, inputs = render_inputs(
            wheelhouse,
            ca_cert,
            no_ca_cert,
            pip_index_url,
            extra_index_url,
            True,
            created,
            revision,
            base_override,
        )
        images = []
        for plan in plans:
            rendered = render_image(plan, options)
            images.append((rendered, write_context(rendered, contexts.resolve(), inputs).resolve()))
        data = bake_file(images, inputs.ca_bundle.resolve() if inputs.ca_bundle else None)
        out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
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
) -> None:
    """Make a minimal base image with Python from distribution packages (needs mmdebstrap)."""
    from imagekit.baseimage import BootstrapRequest, bootstrap
    from imagekit.engine import connect
    from imagekit.plan import IMAGE_REF_RE

    with guard():
        if not IMAGE_REF_RE.match(tag) or ":" not in tag.rsplit("/", 1)[-1]:
            raise InputError(f"--tag {tag!r} is not NAME:TAG", "e.g. imagekit-base/debian:bookworm")
        epoch_text = os.environ.get("SOURCE_DATE_EPOCH")
        if epoch_text is not None and not epoch_text.isdigit():
            raise InputError(f"SOURCE_DATE_EPOCH={epoch_text!r} is not a number of seconds")
        request = BootstrapRequest(
            suite=suite,
            tag=tag,
            mirror=mirror,
            include=tuple(p for p in include.split(",") if p),
            variant=variant,
            docs=docs,
            source_date_epoch=int(epoch_text) if epoch_text else None,
        )
        client = connect()
        say(f"bootstrapping {suite} into {tag} (about a minute)")
        image_id = bootstrap(client, request)
        typer.echo(image_id)
        say(f"{tag} is {image_id}")


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
    from imagekit.engine import age_s, connect, leftovers, remove

    with guard():
        limit_s = _duration_s(older_than)
        client = connect()
        found = [x for x in leftovers(client, run_id) if age_s(x) >= limit_s]
        failed = 0
        for item in found:
            why = None if dry_run else remove(client, item)
            verb = "would remove" if dry_run else ("removed" if why is None else "kept")
            failed += why is not None
            typer.echo(
                f"{verb} {item.kind} {item.id.removeprefix('sha256:')[:12]} {item.name}"
                + (f" ({why})" if why else "")
            )
        say(f"{len(found) - failed} of {len(found)} leftovers {'listed' if dry_run else 'removed'}")


def _duration_s(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit():
        raise InputError(f"--older-than {text!r} is not a duration", "e.g. 30s, 10m, 2h, 1d")
    return int(text[:-1]) * units[text[-1]]
