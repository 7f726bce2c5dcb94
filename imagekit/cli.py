"""The `imagekit` command line: parse options, call one function, print, map errors to exit codes.

stdout carries data (tables, `--json`); stderr carries messages for people.
Expected failures print one message with a hint and exit with their kind's code;
`--debug` adds the traceback.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from imagekit import __version__
from imagekit.errors import (
    BuildFailedError,
    EngineUnavailableError,
    ExitCode,
    ImagekitError,
    InputError,
    ProbeFailedError,
    PublishError,
)

if TYPE_CHECKING:  # imported lazily: `imagekit probe` must not load jinja2 or docker
    from imagekit.context import ContextInputs
    from imagekit.render import RenderOptions

app = typer.Typer(
    name="imagekit",
    help="Build and validate PyTorch GPU container images from a version matrix.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)
compat_app = typer.Typer(help="Show and explain the compatibility data.", no_args_is_help=False)
app.add_typer(compat_app, name="compat")


@dataclass
class _State:
    debug: bool = False


STATE = _State()

MatrixOption = Annotated[
    Path, typer.Option("--matrix", "-m", help="The matrix file.", show_default=True)
]
OnlyOption = Annotated[
    list[str] | None,
    typer.Option("--only", help="Pick images by name, cell id or tag prefix (repeatable)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]


class FlavourChoice(StrEnum):
    slim = "slim"
    full = "full"


class MatrixFormat(StrEnum):
    table = "table"
    json = "json"
    github = "github"


FlavourOption = Annotated[
    FlavourChoice | None, typer.Option("--flavour", help="Only this flavour.")
]


def _say(message: str) -> None:
    typer.echo(message, err=True)


@contextmanager
def _guard() -> Iterator[None]:
    """Turn expected failures into a message and an exit code."""
    try:
        yield
    except ImagekitError as exc:
        if STATE.debug:
            traceback.print_exc()
        _say(f"error: {exc.format()}")
        raise typer.Exit(int(exc.exit_code)) from None
    except KeyboardInterrupt:
        _say("interrupted")
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None


def _version(value: bool) -> None:
    if value:
        typer.echo(f"imagekit {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors.")] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    STATE.debug = debug


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


# matrix ----------------------------------------------------------------------


@app.command("matrix")
def matrix_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    fmt: Annotated[MatrixFormat, typer.Option("--format", help="Output format.")] = (
        MatrixFormat.table
    ),
) -> None:
    """List the images the matrix expands to."""
    from imagekit.matrix import load_matrix
    from imagekit.report import plan_row, plans_table

    with _guard():
        loaded = load_matrix(matrix)
        github = fmt is MatrixFormat.github
        plans = loaded.select(only, flavour.value if flavour else None, allow_empty=github)
        if github:
            include = [plan_row(p) for p in plans]
            # Compact, one line: what $GITHUB_OUTPUT and fromJSON() take.
            typer.echo(json.dumps({"include": include}, sort_keys=True, separators=(",", ":")))
        elif fmt is MatrixFormat.json:
            _print_json([plan_row(p) for p in plans])
        else:
            typer.echo(plans_table(plans))
            _say(f"{matrix}: {len(loaded.cells)} cells, {len(plans)} images")


# check -----------------------------------------------------------------------


@app.command("check")
def check_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    json_out: JsonOption = False,
) -> None:
    """Validate the matrix and lint every rendered Dockerfile (exit 0 or 2)."""
    from imagekit.lint import hadolint_binary, lint
    from imagekit.matrix import load_matrix
    from imagekit.render import RenderOptions, render_image

    with _guard():
        loaded = load_matrix(matrix)
        for warning in loaded.warnings:
            _say(f"warning: {warning.format()}")
        binary = hadolint_binary()
        findings = []
        variants = (RenderOptions(), RenderOptions(buildkit=True, ca_bundle=True))
        for plan in loaded.plans:
            for options in variants:
                rendered = render_image(plan, options)
                kind = "buildkit" if options.buildkit else "docker"
                findings += lint(f"{plan.name} ({kind})", rendered.dockerfile, binary)
        failing = [f for f in findings if f.fails]
        for finding in findings:
            _say(finding.format())
        linted = len(loaded.plans) * len(variants)
        if json_out:
            _print_json(
                {
                    "matrix": str(matrix),
                    "cells": len(loaded.cells),
                    "images": len(loaded.plans),
                    "dockerfiles_linted": linted,
                    "findings": [f.__dict__ for f in findings],
                    "warnings": [w.format() for w in loaded.warnings],
                    "ok": not failing,
                }
            )
        if failing:
            raise InputError(
                f"hadolint reported {len(failing)} problems in the rendered Dockerfiles",
                "fix templates/Dockerfile.j2, or ignore a rule with its reason in "
                "imagekit/data/hadolint.yaml",
            )
        _say(
            f"{matrix}: ok: {len(loaded.cells)} cells, {len(loaded.plans)} images, "
            f"{linted} Dockerfiles lint clean"
        )


# inputs shared by render, build and bake ------------------------------------------

WheelhouseOption = Annotated[
    Path | None, typer.Option(help="Install from these wheels only (offline).")
]
CaCertOption = Annotated[
    Path | None,
    typer.Option(
        help="Extra CA bundle for pip (builder stages only). "
        "Default: $PIP_CERT, $SSL_CERT_FILE or $REQUESTS_CA_BUNDLE."
    ),
]
NoCaCertOption = Annotated[bool, typer.Option(help="Use no extra CA bundle.")]
PipIndexOption = Annotated[str | None, typer.Option(help="Mirror for every package index.")]
ExtraIndexOption = Annotated[
    list[str] | None, typer.Option(help="Additional package index (repeatable).")
]
CreatedOption = Annotated[str | None, typer.Option(help="org.opencontainers.image.created")]
RevisionOption = Annotated[str | None, typer.Option(help="org.opencontainers.image.revision")]
BaseOverrideOption = Annotated[
    list[str] | None,
    typer.Option(help="Use a local base instead: IMAGE=LOCAL_IMAGE (repeatable)."),
]


def _render_inputs(
    wheelhouse: Path | None,
    ca_cert: Path | None,
    no_ca_cert: bool,
    pip_index_url: str | None,
    extra_index_url: list[str] | None,
    buildkit: bool,
    created: str | None,
    revision: str | None,
    base_override: list[str] | None,
) -> tuple[RenderOptions, ContextInputs]:
    """Check the render options a user gave and turn them into values."""
    from imagekit.context import ContextInputs, resolve_ca_bundle
    from imagekit.render import RenderOptions

    ca = None if no_ca_cert else resolve_ca_bundle(ca_cert)
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise InputError(f"--wheelhouse {wheelhouse} is not a folder")
    overrides = []
    for item in base_override or ():
        source, sep, target = item.partition("=")
        if not sep or not source or not target:
            raise InputError(
                f"--base-override {item!r} is not IMAGE=LOCAL_IMAGE",
                "e.g. --base-override ubuntu:24.04=imagekit-base/ubuntu:noble",
            )
        overrides.append((source, target))
    options = RenderOptions(
        wheelhouse=wheelhouse is not None,
        ca_bundle=ca is not None,
        pip_index_url=pip_index_url,
        extra_index_urls=tuple(extra_index_url or ()),
        buildkit=buildkit,
        created=created,
        revision=revision,
        base_overrides=tuple(overrides),
    )
    return options, ContextInputs(wheelhouse=wheelhouse, ca_bundle=ca)


# render ----------------------------------------------------------------------


@app.command("render")
def render_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    out: Annotated[Path, typer.Option("--out", help="Folder for the build contexts.")] = Path(
        "out"
    ),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    wheelhouse: WheelhouseOption = None,
    ca_cert: CaCertOption = None,
    no_ca_cert: NoCaCertOption = False,
    pip_index_url: PipIndexOption = None,
    extra_index_url: ExtraIndexOption = None,
    buildkit: Annotated[bool, typer.Option(help="Render BuildKit syntax (cache, secrets).")] = (
        False
    ),
    created: CreatedOption = None,
    revision: RevisionOption = None,
    base_override: BaseOverrideOption = None,
    check: Annotated[
        bool, typer.Option("--check", help="Compare with what --out holds; exit 1 if different.")
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Write a Dockerfile and build context per image (one folder each)."""
    from imagekit.context import compare_tree, render_tree
    from imagekit.matrix import load_matrix

    with _guard():
        loaded = load_matrix(matrix)
        plans = loaded.select(only, flavour.value if flavour else None)
        options, inputs = _render_inputs(
            wheelhouse,
            ca_cert,
            no_ca_cert,
            pip_index_url,
            extra_index_url,
            buildkit,
            created,
            revision,
            base_override,
        )
        if check:
            differences = compare_tree(plans, options, inputs, out)
            for line in differences:
                _say(line)
            if differences:
                _say(f"{out}: {len(differences)} differences; re-render with `make goldens`")
                raise typer.Exit(1)
            _say(f"{out}: {len(plans)} images match a fresh render")
            return
        folders = render_tree(plans, options, inputs, out)
        if json_out:
            _print_json([str(f) for f in folders])
        else:
            for folder in folders:
                typer.echo(str(folder))
        _say(f"rendered {len(folders)} images into {out}")


# build -----------------------------------------------------------------------


class BuilderChoice(StrEnum):
    sdk = "sdk"
    buildx = "buildx"
    auto = "auto"


ResultsOption = Annotated[
    Path, typer.Option(help="Folder that receives results/<run-id>/.", envvar="IMAGEKIT_RESULTS")
]


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

    with _guard():
        loaded = load_matrix(matrix)
        plans = loaded.select(only, flavour.value if flavour else None)
        use_buildx = builder is BuilderChoice.buildx or (
            builder is BuilderChoice.auto and buildx_available()
        )
        options, inputs = _render_inputs(
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
        with _event_view() as view:
            outcome = BuildRun(client, chosen, plans, settings, run, view).execute()
        if json_out:
            _print_json({"run_id": run.run_id, "results": [r.__dict__ for r in outcome]})
        else:
            typer.echo(build_table(outcome))
        _say(f"results: {run.root}")
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


@contextmanager
def _event_view() -> Iterator[Any]:
    """A live table on a terminal, plain lines otherwise."""
    from imagekit.events import LiveView, PlainView

    if sys.stderr.isatty() and os.environ.get("CI") is None:
        with LiveView() as view:
            yield view
    else:
        yield PlainView()


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

    with _guard():
        loaded = load_matrix(matrix)
        plans = loaded.select(only, flavour.value if flavour else None)
        options, inputs = _render_inputs(
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
        _say(f"wrote {out}: {len(images)} targets; build with `docker buildx bake -f {out}`")


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
) -> None:
    """Make a minimal base image with Python from distribution packages (needs mmdebstrap)."""
    from imagekit.baseimage import BootstrapRequest, bootstrap
    from imagekit.engine import connect
    from imagekit.plan import IMAGE_REF_RE

    with _guard():
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
            source_date_epoch=int(epoch_text) if epoch_text else None,
        )
        client = connect()
        _say(f"bootstrapping {suite} into {tag} (about a minute)")
        image_id = bootstrap(client, request)
        typer.echo(image_id)
        _say(f"{tag} is {image_id}")


# gc --------------------------------------------------------------------------


@app.command("gc")
def gc_command(
    older_than: Annotated[
        str, typer.Option(help="Only what is older than this: 30s, 10m, 2h, 1d.")
    ] = "0s",
    dry_run: Annotated[bool, typer.Option(help="List, remove nothing.")] = False,
) -> None:
    """Remove containers and dangling build-stage images that imagekit left behind."""
    from imagekit.engine import age_s, connect, leftovers, remove

    with _guard():
        limit_s = _duration_s(older_than)
        client = connect()
        found = [x for x in leftovers(client) if age_s(x) >= limit_s]
        failed = 0
        for item in found:
            why = None if dry_run else remove(client, item)
            verb = "would remove" if dry_run else ("removed" if why is None else "kept")
            failed += why is not None
            typer.echo(
                f"{verb} {item.kind} {item.id.removeprefix('sha256:')[:12]} {item.name}"
                + (f" ({why})" if why else "")
            )
        _say(
            f"{len(found) - failed} of {len(found)} leftovers {'listed' if dry_run else 'removed'}"
        )


def _duration_s(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit():
        raise InputError(f"--older-than {text!r} is not a duration", "e.g. 30s, 10m, 2h, 1d")
    return int(text[:-1]) * units[text[-1]]


# compat ----------------------------------------------------------------------


@compat_app.callback(invoke_without_command=True)
def compat_show(
    ctx: typer.Context,
    torch: Annotated[str | None, typer.Option(help="Show one release, e.g. 2.8.0.")] = None,
    json_out: JsonOption = False,
) -> None:
    """Show the compatibility table (or one release)."""
    if ctx.invoked_subcommand is not None:
        return
    from imagekit.compat import load_compat
    from imagekit.report import compat_rows, table

    with _guard():
        data = load_compat()
        if torch is not None and torch not in data.torch:
            raise InputError(
                f"torch {torch} is not a release imagekit knows",
                f"known releases: {', '.join(data.torch_versions())}",
            )
        releases = [torch] if torch else data.torch_versions()
        if json_out:
            _print_json({t: data.torch[t].model_dump(mode="json") for t in releases})
            return
        header, rows = compat_rows(data, releases)
        typer.echo(table(header, rows))
        _say("* experimental in PyTorch's release matrix; ~ inferred, checked at verify time")


@compat_app.command("explain")
def compat_explain(
    torch: Annotated[str, typer.Option(help="PyTorch release, e.g. 2.8.0.")],
    cuda: Annotated[str, typer.Option(help="CUDA version, e.g. 12.8, or cpu.")],
    python: Annotated[str | None, typer.Option(help="Python, e.g. 3.12.")] = None,
    os_name: Annotated[str | None, typer.Option("--os", help="Base OS, e.g. ubuntu-24.04.")] = (
        None
    ),
    json_out: JsonOption = False,
) -> None:
    """Explain one cell: what it derives to, or why it cannot be built."""
    from imagekit.compat import load_compat
    from imagekit.report import explain_cell

    with _guard():
        facts, reasons = explain_cell(load_compat(), torch, cuda, python, os_name)
        if json_out:
            _print_json({"ok": not reasons, "facts": facts, "reasons": reasons})
        else:
            for key, value in facts.items():
                typer.echo(f"{key:<18} {value}")
        if reasons:
            raise InputError("cannot build this cell:\n  - " + "\n  - ".join(reasons))


# schema ----------------------------------------------------------------------


@app.command("schema")
def schema_command(
    out: Annotated[Path | None, typer.Option(help="Write to this file instead of stdout.")] = None,
) -> None:
    """Print the JSON Schema of matrix.yaml (for editors and CI)."""
    from imagekit.matrix_schema import json_schema

    text = json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        _say(f"wrote {out}")


# verify ----------------------------------------------------------------------


class GpusChoice(StrEnum):
    auto = "auto"
    all = "all"
    none = "none"


ProbesOption = Annotated[
    str | None, typer.Option(help="Comma-separated probes (default: all that apply).")
]
TimeoutOption = Annotated[
    float | None, typer.Option(help="Time limit per image in seconds (default: from the probes).")
]


@app.command("verify")
def verify_command(
    images: Annotated[
        list[str] | None, typer.Argument(help="Images to verify (default: the matrix's).")
    ] = None,
    matrix: MatrixOption = Path("matrix.yaml"),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    gpus: Annotated[GpusChoice, typer.Option(help="auto: GPUs when the engine has them.")] = (
        GpusChoice.auto
    ),
    probes: ProbesOption = None,
    timeout_s: TimeoutOption = None,
    shm_size: Annotated[int, typer.Option(help="/dev/shm bytes (NCCL needs >= 1 GiB).")] = (
        2 << 30
    ),
    structure: Annotated[bool, typer.Option(help="Run the structure checks (testinfra).")] = True,
    probes_dir: Annotated[
        Path | None, typer.Option(help="Run the probes of this folder instead of imagekit's.")
    ] = None,
    results: ResultsOption = Path("results"),
    json_out: JsonOption = False,
) -> None:
    """Run the probes inside each image and record the results."""
    from imagekit.engine import connect, engine_info
    from imagekit.resources import probes_dir as bundled_probes
    from imagekit.results import RunFolder
    from imagekit.summary import summary_rows
    from imagekit.verify import Target, VerifyRun, VerifySettings

    with _guard():
        if images:
            targets = [Target(_record_name(ref), ref) for ref in images]
        else:
            from imagekit.matrix import load_matrix

            loaded = load_matrix(matrix)
            plans = loaded.select(only, flavour.value if flavour else None)
            targets = [Target(p.name, p.reference, p.required_probes) for p in plans]
        folder = probes_dir or bundled_probes()
        if not (folder / "_runner.py").is_file():
            raise InputError(
                f"--probes-dir {folder} has no _runner.py",
                "copy imagekit's probes/ folder and add your probes beside them",
            )
        settings = VerifySettings(
            probes_dir=folder,
            probes=tuple(p for p in (probes or "").split(",") if p),
            gpus=gpus.value,
            timeout_s=timeout_s,
            shm_bytes=shm_size,
            structure=structure,
        )
        client = connect()
        engine = engine_info(client)
        run = RunFolder.create(results)
        run.write_run("verify", engine, {"images": [t.reference for t in targets]})
        verifier = VerifyRun(client, settings, run, _plain_view(), engine)
        for note in verifier.notes():
            _say(f"note: {note}")
        try:
            records = verifier.execute(targets)
        except KeyboardInterrupt:
            _say(f"interrupted; finished images are recorded in {run.root}")
            raise
        header, rows = summary_rows(verifier.load_records())
        if json_out:
            _print_json({"run_id": run.run_id, "images": records})
        else:
            from imagekit.report import table

            typer.echo(table(header, rows))
        _say(f"results: {run.root}")
        failed = [n for n, r in records.items() if r["verify"]["status"] != "pass"]
        if failed:
            raise ProbeFailedError(
                f"{len(failed)} of {len(records)} images failed verification: {', '.join(failed)}",
                f"details: {run.root / 'summary.md'}",
            )


def _record_name(reference: str) -> str:
    """A file-safe record name for an image reference."""
    import re

    return re.sub(r"[^A-Za-z0-9_.-]+", "_", reference.split("/")[-1]).strip("_") or "image"


def _plain_view() -> Any:
    from imagekit.events import PlainView

    return PlainView()


# probe (host mode) -------------------------------------------------------------


class DeviceChoice(StrEnum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


@app.command("probe")
def probe_command(
    probes: ProbesOption = None,
    device: Annotated[DeviceChoice, typer.Option(help="Where the probes compute.")] = (
        DeviceChoice.auto
    ),
    timeout_s: TimeoutOption = None,
    out: Annotated[
        Path | None, typer.Option(help="Also write the results JSON to this file.")
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Run the probes in this Python environment, no Docker (a doctor for GPU nodes)."""
    import platform

    from imagekit.hostprobe import run_host
    from imagekit.probes import discover, overall, select
    from imagekit.resources import probes_dir

    with _guard():
        folder = probes_dir()
        chosen = select(discover(folder), [p for p in (probes or "").split(",") if p] or None)
        limit = timeout_s or sum(s.timeout_s for s in chosen) + 60
        output, wall_s = run_host(
            folder, [s.name for s in chosen], {}, device=device.value, timeout_s=limit
        )
        status = overall(output.results)
        document = {
            "schema_version": 1,
            "mode": "host",
            "imagekit_version": __version__,
            "host": {"hostname": platform.node(), "python": platform.python_version()},
            "device": output.device,
            "device_reason": output.device_reason,
            "status": status,
            "wall_s": round(wall_s, 3),
            "probes": output.results,
        }
        if out is not None:
            from imagekit.results import write_json

            write_json(out, document)
        if json_out:
            _print_json(document)
        else:
            from imagekit.report import table

            rows = [
                [
                    r["probe"],
                    r["status"],
                    r.get("reason", "")[:60],
                    ", ".join(f"{k}={v:g}" for k, v in sorted(r["metrics"].items()))[:70],
                ]
                for r in output.results
            ]
            typer.echo(table(["PROBE", "STATUS", "REASON", "METRICS"], rows))
            _say(f"{status} on {output.device} ({output.device_reason}) in {wall_s:.1f}s")
        if status != "pass":
            raise ProbeFailedError(f"probes failed on {output.device}")


# report ----------------------------------------------------------------------


@app.command("report")
def report_command(
    runs: Annotated[
        list[Path] | None,
        typer.Argument(help="Run folders (default: the newest under --results); two: compare."),
    ] = None,
    results: ResultsOption = Path("results"),
    threshold: Annotated[
        float, typer.Option(help="A metric change worse than this fraction is reported.")
    ] = 0.2,
) -> None:
    """Show a run's summary table; with two runs, what got worse from the first to the second."""
    from imagekit.report import table
    from imagekit.summary import changes, summary_rows

    with _guard():
        folders = list(runs or [])
        if not folders:
            candidates = sorted(p for p in results.glob("*/images") if any(p.glob("*.json")))
            if not candidates:
                raise InputError(f"no runs under {results}", "run imagekit verify first")
            folders = [candidates[-1].parent]
        if len(folders) > 2:
            raise InputError("report takes one run, or two to compare")
        loaded = [_load_run(f) for f in folders]
        header, rows = summary_rows(loaded[-1])
        typer.echo(table(header, rows))
        _say(f"run: {folders[-1]}")
        if len(loaded) == 2:
            found = changes(loaded[0], loaded[1], threshold)
            for line in found:
                typer.echo(line)
            _say(f"{len(found)} changes for the worse from {folders[0].name} to {folders[1].name}")


def _load_run(folder: Path) -> dict[str, dict[str, Any]]:
    images = folder / "images"
    if not images.is_dir():
        raise InputError(f"{folder} is not an imagekit run folder (no images/)")
    return {p.stem: json.loads(p.read_text()) for p in sorted(images.glob("*.json"))}


# tags and publish --------------------------------------------------------------


@app.command("tags")
def tags_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    registry: Annotated[str | None, typer.Option(help="Push to this registry instead.")] = None,
    json_out: JsonOption = False,
) -> None:
    """List every tag publish would push: versioned (immutable) and aliases (may move)."""
    from imagekit.matrix import load_matrix
    from imagekit.publish import retarget
    from imagekit.report import table

    with _guard():
        plans = load_matrix(matrix).select(only, flavour.value if flavour else None)
        rows = []
        for plan in plans:
            repository = retarget(plan.repository, registry)
            rows.append([plan.name, f"{repository}:{plan.tag}", "versioned"])
            rows += [[plan.name, f"{repository}:{alias}", "alias"] for alias in plan.aliases]
        if json_out:
            _print_json([{"image": r[0], "tag": r[1], "kind": r[2]} for r in rows])
        else:
            typer.echo(table(["IMAGE", "TAG", "KIND"], rows))


@app.command("publish")
def publish_command(
    matrix: MatrixOption = Path("matrix.yaml"),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    registry: Annotated[
        str | None, typer.Option(help="Push to this registry instead of the matrix's.")
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="Check everything, push nothing.")] = False,
    force: Annotated[
        bool, typer.Option(help="Publish despite the gate (recorded in the results).")
    ] = False,
    candidate: Annotated[
        str | None, typer.Option(help="Push only TAG-candidate-ID (CI, before GPU runs).")
    ] = None,
    from_candidate: Annotated[
        str | None, typer.Option(help="Pull TAG-candidate-ID and publish it (CI promotion).")
    ] = None,
    attempts: Annotated[int, typer.Option(min=1, max=10, help="Tries per tag.")] = 4,
    backoff_s: Annotated[float, typer.Option(help="First retry delay; doubles each time.")] = 2.0,
    results: ResultsOption = Path("results"),
    json_out: JsonOption = False,
) -> None:
    """Push the tags of images that passed verification (exit 6 if any is refused or fails)."""
    from imagekit.engine import connect, engine_info
    from imagekit.matrix import load_matrix
    from imagekit.publish import DRY_RUN, PUBLISHED, UNCHANGED, PublishRun, PublishSettings
    from imagekit.report import table
    from imagekit.results import RunFolder

    with _guard():
        plans = load_matrix(matrix).select(only, flavour.value if flavour else None)
        client = connect()
        run = RunFolder.create(results)
        run.write_run("publish", engine_info(client), {"registry": registry, "force": force})
        settings = PublishSettings(
            results_dir=results,
            registry=registry,
            dry_run=dry_run,
            force=force,
            attempts=attempts,
            backoff_s=backoff_s,
        )
        publisher = PublishRun(client, settings, run, _plain_view())
        done = [publisher.publish_one(plan) for plan in plans]
        if json_out:
            _print_json({"run_id": run.run_id, "images": [r.__dict__ for r in done]})
        else:
            rows = [
                [
                    r.name,
                    r.status + (" (forced)" if r.forced else ""),
                    ", ".join(t["tag"].rsplit(":", 1)[1] + "=" + t["status"] for t in r.tags),
                    "; ".join(r.reasons)[:100],
                ]
                for r in done
            ]
            typer.echo(table(["IMAGE", "STATUS", "TAGS", "REASONS"], rows))
        _say(f"results: {run.root / 'publish.json'}")
        bad = [r for r in done if r.status not in (PUBLISHED, UNCHANGED, DRY_RUN)]
        if bad:
            raise PublishError(
                f"{len(bad)} of {len(done)} images not published: "
                + "; ".join(f"{r.name}: {r.status}" for r in bad),
                "verify them first (imagekit verify), or see the reasons above",
            )


# run -------------------------------------------------------------------------


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_command(
    image: Annotated[str, typer.Argument(help="A full image (any image for --shell / -- CMD).")],
    command: Annotated[
        list[str] | None, typer.Argument(help="After --: a command to run instead of a service.")
    ] = None,
    jupyter: Annotated[bool, typer.Option("--jupyter", help="JupyterLab (the default).")] = False,
    ssh: Annotated[bool, typer.Option("--ssh", help="sshd, key only.")] = False,
    tensorboard: Annotated[bool, typer.Option("--tensorboard", help="TensorBoard.")] = False,
    shell: Annotated[bool, typer.Option("--shell", help="An interactive shell.")] = False,
    authorized_keys: Annotated[
        Path | None, typer.Option(help="Public keys for --ssh (default: ~/.ssh/id_*.pub).")
    ] = None,
    workspace: Annotated[
        Path, typer.Option(help="Folder mounted at /workspace (default: here).")
    ] = Path("."),
    gpus: Annotated[GpusChoice, typer.Option(help="auto: GPUs when the engine has them.")] = (
        GpusChoice.auto
    ),
    port: Annotated[
        list[str] | None, typer.Option(help="HOST:CONTAINER port mapping (repeatable).")
    ] = None,
) -> None:
    """Start JupyterLab, sshd or TensorBoard in an image (or a shell / a command)."""
    from imagekit import workstation
    from imagekit.engine import connect, engine_info

    with _guard():
        chosen = [
            n
            for n, on in (
                ("jupyter", jupyter),
                ("ssh", ssh),
                ("tensorboard", tensorboard),
                ("shell", shell),
            )
            if on
        ]
        if len(chosen) > 1 or (chosen and command):
            raise InputError("pick one of --jupyter, --ssh, --tensorboard, --shell or -- CMD")
        service = chosen[0] if chosen else ("command" if command else "jupyter")
        if not workspace.is_dir():
            raise InputError(f"--workspace {workspace} is not a folder")
        ports = {}
        for item in port or ():
            host, sep, inside = item.partition(":")
            if not sep or not host.isdigit() or not inside.isdigit():
                raise InputError(f"--port {item!r} is not HOST:CONTAINER", "e.g. --port 18888:8888")
            ports[int(inside)] = int(host)
        client = connect()
        use_gpus = gpus is GpusChoice.all or (
            gpus is GpusChoice.auto and any("nvidia" in r for r in engine_info(client)["runtimes"])
        )
        if service in ("shell", "command"):
            _exec_docker_run(
                image, ["shell"] if service == "shell" else list(command or []), workspace, use_gpus
            )
        keys = authorized_keys or (workstation.default_public_key() if service == "ssh" else None)
        request = workstation.RunRequest(
            image=image,
            service=service,
            workspace=workspace,
            gpus=use_gpus,
            host_ports=ports,
            user=workstation.host_user(),
            authorized_keys=keys,
        )
        container = workstation.start(client, request)
        try:
            _say(f"started {container.short_id} ({service}); waiting for it to answer ...")
            workstation.wait_ready(container, request)
            output = container.exec_run(["id", "-un"]).output
            name = output.decode().strip() if isinstance(output, bytes) else ""
            typer.echo(workstation.how_to_reach(request, name or "user"))
            _say("Ctrl-C stops and removes the container")
            for chunk in container.logs(stream=True, follow=True, since=int(time.time())):
                sys.stderr.write(chunk.decode("utf-8", "replace"))
            container.reload()
            raise InputError(f"the container stopped (exit {container.attrs['State']['ExitCode']})")
        finally:
            workstation.remove(container)


def _exec_docker_run(image: str, args: list[str], workspace: Path, gpus: bool) -> None:
    """Interactive runs belong to the docker CLI, which owns the terminal; replace this process."""
    import shutil

    from imagekit.workstation import SHM_BYTES, host_user

    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise InputError("--shell and -- CMD need the docker CLI on PATH")
    argv = [
        docker_cli,
        "run",
        "--rm",
        "-i",
        "--shm-size",
        str(SHM_BYTES),
        "-v",
        f"{workspace.resolve()}:/workspace",
        "--label",
        "io.imagekit.run-id=run-cli",
    ]
    if sys.stdin.isatty():
        argv.append("-t")
    if (user := host_user()) is not None:
        argv += ["--user", user]
    if gpus:
        argv += ["--gpus", "all"]
    os.execvp(docker_cli, [*argv, image, *args])


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        _say("interrupted")
        sys.exit(int(ExitCode.INTERRUPTED))
