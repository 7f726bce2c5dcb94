"""The doctor command: can these images use this host's GPUs?"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Annotated, Any

import typer

from imagekit.cli.common import (
    FlavourOption,
    JsonOption,
    OnlyOption,
    PlatformOption,
    app,
    dispatch,
    handles,
    print_json,
    say,
)
from imagekit.cli.requests import DoctorRequest, Selection
from imagekit.core.labels import ImageLabels
from imagekit.core.ports import EngineInfo
from imagekit.errors import GpuMismatchError

MARKS = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}


@app.command("doctor")
def doctor_command(
    image: Annotated[
        list[str] | None,
        typer.Option(
            "--image", help="An image to check (repeatable): local engine first, then registry."
        ),
    ] = None,
    matrix: Annotated[
        Path | None,
        typer.Option("--matrix", "-m", help="Check every image this matrix would build."),
    ] = None,
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    platform_choice: PlatformOption = None,
    nvidia_smi: Annotated[
        Path | None, typer.Option(help="The nvidia-smi to ask (default: the one on PATH).")
    ] = None,
    json_out: JsonOption = False,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            help="A cosign public key: also show the level each --image's signed verify "
            "attestation reached.",
        ),
    ] = None,
) -> None:
    """Read this host's NVIDIA driver and GPUs and say whether each image's labels allow it to
    run here (driver new enough, architecture compiled in), before anything is pulled.

    Exit 7 when an image cannot use the GPUs here, or needs a GPU this host lacks."""
    dispatch(
        lambda: DoctorRequest(
            tuple(image or ()),
            matrix,
            tuple(only or ()),
            flavour.value if flavour else None,
            nvidia_smi,
            json_out,
            key,
            platform_choice.value if platform_choice else None,
        )
    )


@handles(DoctorRequest)
def doctor(request: DoctorRequest) -> None:
    """Assess each image against this host; exit 7 when one cannot use its GPUs."""
    from imagekit.adapters.hostgpu import read_host
    from imagekit.adapters.imagelabels import labels_of
    from imagekit.core.compat import load_compat
    from imagekit.core.doctor import assess, doctor_document, engine_findings, host_findings
    from imagekit.core.render import RenderOptions, image_labels

    targets = []
    if request.matrix is not None:
        selection = Selection(request.matrix, request.only, request.flavour, request.platform)
        targets += [(p.reference, image_labels(p, RenderOptions())) for p in selection.plans()]
    targets += [(reference, labels_of(reference)) for reference in request.images]
    host = read_host(str(request.nvidia_smi) if request.nvidia_smi else None)
    engine, why_none = _engine()
    machine = platform.machine()
    assessments = [assess(name, labels, host, load_compat(), machine) for name, labels in targets]
    attested: dict[str, dict[str, Any]] = {}
    if request.key:
        from imagekit.adapters.cosign import check_key
        from imagekit.cli.attest import attested_level

        check_key("--key", request.key)
        attested = {ref: attested_level(ref, request.key) for ref in request.images}
    if request.json:
        document = doctor_document(host, assessments, engine)
        for entry in document["images"]:
            if entry["image"] in attested:
                entry["attested"] = attested[entry["image"]]
        print_json(document)
    else:
        typer.echo("host:")
        typer.echo(f"  {MARKS['ok']} architecture: {platform.machine()}")
        typer.echo("\n".join(f"  {MARKS[f.level]} {f.text}" for f in host_findings(host)))
        typer.echo("engine:")
        about = engine_findings(engine, host, why_none)
        typer.echo("\n".join(f"  {MARKS[f.level]} {f.text}" for f in about))
        for a in assessments:
            found = attested.get(a.image)
            level = f"; attested level: {found['level'] or 'none'}" if found else ""
            typer.echo(f"{a.image}: {a.verdict}{level}")
            typer.echo("\n".join(f"  {MARKS[f.level]} {f.text}" for f in a.findings))
            if found:
                mark = MARKS["ok"] if found["level"] else MARKS["warn"]
                typer.echo(f"  {mark} attestation: {found['why']}")
    refused = [a.image for a in assessments if not a.runs]
    if engine is not None and not engine.remote and host.driver and not engine.gpu_runtime:
        # The driver is there, but containers of this engine get no GPU.
        cuda = {name for name, labels in targets if ImageLabels.parse(labels).cuda}
        refused += [a.image for a in assessments if a.runs and a.image in cuda]
    if refused:
        raise GpuMismatchError(
            f"{len(refused)} of {len(assessments)} images cannot use this host's GPUs: "
            + ", ".join(refused),
            "see the FAIL lines above",
        )
    if not targets:
        say("give --image IMAGE or --matrix FILE to check images against this host")


def _engine() -> tuple[EngineInfo | None, str]:
    """The engine's facts, or None and why: doctor also runs on GPU nodes with no engine."""
    from imagekit.adapters.engine import connect, engine_info
    from imagekit.errors import ImagekitError

    try:
        return engine_info(connect()), ""
    except ImagekitError as exc:
        return None, exc.message
