"""The doctor command: can these images use this host's GPUs?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from imagekit.cli.common import FlavourOption, JsonOption, OnlyOption, app, guard, print_json, say
from imagekit.errors import GpuMismatchError, InputError

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
    nvidia_smi: Annotated[
        Path | None, typer.Option(help="The nvidia-smi to ask (default: the one on PATH).")
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Read this host's NVIDIA driver and GPUs and say whether each image's labels allow it to
    run here (driver new enough, architecture compiled in), before anything is pulled.

    Exit 7 when an image cannot use the GPUs here, or needs a GPU this host lacks."""
    from imagekit.compat import load_compat
    from imagekit.doctor import assess, host_findings
    from imagekit.hostgpu import read_host

    with guard():
        if only and matrix is None:
            raise InputError("--only picks images of a matrix", "add --matrix FILE")
        targets = _labels_of(list(image or []), matrix, only, flavour.value if flavour else None)
        host = read_host(str(nvidia_smi) if nvidia_smi else None)
        data = load_compat()
        assessments = [assess(name, labels, host, data) for name, labels in targets]
        if json_out:
            print_json(
                {
                    "host": {
                        "driver": host.driver,
                        "source": host.source,
                        "problems": list(host.problems),
                        "gpus": [
                            {"index": g.index, "name": g.name, "capability": g.capability}
                            for g in host.gpus
                        ],
                    },
                    "images": [
                        {
                            "image": a.image,
                            "verdict": a.verdict,
                            "runs": a.runs,
                            "findings": [{"level": f.level, "text": f.text} for f in a.findings],
                        }
                        for a in assessments
                    ],
                }
            )
        else:
            typer.echo("host:")
            for finding in host_findings(host):
                typer.echo(f"  {MARKS[finding.level]} {finding.text}")
            for a in assessments:
                typer.echo(f"{a.image}: {a.verdict}")
                for finding in a.findings:
                    typer.echo(f"  {MARKS[finding.level]} {finding.text}")
        refused = [a.image for a in assessments if not a.runs]
        if refused:
            raise GpuMismatchError(
                f"{len(refused)} of {len(assessments)} images cannot use this host's GPUs: "
                + ", ".join(refused),
                "see the FAIL lines above",
            )
        if not targets:
            say("give --image IMAGE or --matrix FILE to check images against this host")


def _labels_of(
    images: list[str], matrix: Path | None, only: list[str] | None, flavour: str | None
) -> list[tuple[str, dict[str, str]]]:
    """(name, labels) of every image asked for: rendered from the matrix, or read from the
    local engine, else from the image's registry (the config blob only, no layer)."""
    found: list[tuple[str, dict[str, str]]] = []
    if matrix is not None:
        from imagekit.matrix import load_matrix
        from imagekit.render import RenderOptions, image_labels

        for plan in load_matrix(matrix).select(only, flavour):
            found.append((plan.reference, image_labels(plan, RenderOptions())))
    for reference in images:
        found.append((reference, _image_labels(reference)))
    return found


def _image_labels(reference: str) -> dict[str, str]:
    from imagekit.errors import EngineUnavailableError

    try:
        from imagekit.engine import connect, inspect_image

        facts = inspect_image(connect(), reference)
        if facts is not None:
            return facts.labels
    except EngineUnavailableError:
        pass  # no engine here: a registry may still answer
    from imagekit.registry import RegistryError, registry_auth, remote_config, split_reference

    try:
        config: dict[str, Any] | None = remote_config(
            reference, registry_auth(split_reference(reference)[0])
        )
    except RegistryError as exc:
        raise InputError(
            f"image {reference} is not in the local engine and its registry did not answer: {exc}",
            "pull or build it, or check the registry name",
        ) from None
    if config is None:
        raise InputError(
            f"image {reference} is neither in the local engine nor in its registry",
            "check the name and tag (imagekit tags lists them)",
        )
    return dict((config.get("config") or {}).get("Labels") or {})
