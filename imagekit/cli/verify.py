"""Commands that prove images: verify, probe (host mode), report."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from imagekit import __version__
from imagekit.cli.common import (
    FlavourOption,
    GpusChoice,
    JsonOption,
    MatrixOption,
    OnlyOption,
    ProbesOption,
    ResultsOption,
    TimeoutOption,
    app,
    guard,
    plain_view,
    print_json,
    say,
)
from imagekit.errors import (
    InputError,
    ProbeFailedError,
)

# verify ----------------------------------------------------------------------


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

    with guard():
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
        verifier = VerifyRun(client, settings, run, plain_view(), engine)
        for note in verifier.notes():
            say(f"note: {note}")
        try:
            records = verifier.execute(targets)
        except KeyboardInterrupt:
            say(f"interrupted; finished images are recorded in {run.root}")
            raise
        header, rows = summary_rows(verifier.load_records())
        if json_out:
            print_json({"run_id": run.run_id, "images": records})
        else:
            from imagekit.report import table

            typer.echo(table(header, rows))
        say(f"results: {run.root}")
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

    with guard():
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
            print_json(document)
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
            say(f"{status} on {output.device} ({output.device_reason}) in {wall_s:.1f}s")
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

    with guard():
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
        say(f"run: {folders[-1]}")
        if len(loaded) == 2:
            found = changes(loaded[0], loaded[1], threshold)
            for line in found:
                typer.echo(line)
            say(f"{len(found)} changes for the worse from {folders[0].name} to {folders[1].name}")


def _load_run(folder: Path) -> dict[str, dict[str, Any]]:
    images = folder / "images"
    if not images.is_dir():
        raise InputError(f"{folder} is not an imagekit run folder (no images/)")
    return {p.stem: json.loads(p.read_text()) for p in sorted(images.glob("*.json"))}
