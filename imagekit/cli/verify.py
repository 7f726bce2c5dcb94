"""Commands that prove images: verify, probe (host mode), report."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from imagekit.cli.common import (
    FlavourOption,
    GpusOption,
    JsonOption,
    MatrixOption,
    OnlyOption,
    PlatformOption,
    ProbesOption,
    ResultsOption,
    TimeoutOption,
    app,
    dispatch,
    handles,
    note_leftovers,
    plain_view,
    print_json,
    say,
)
from imagekit.cli.requests import (
    ProbeCommand,
    ReportRequest,
    Selection,
    VerifyCommand,
    probe_names,
    record_name,
)
from imagekit.core.probe_contract import ProbeDevice
from imagekit.core.records import Verdict
from imagekit.core.runtime import DEFAULT_SHM_BYTES, GpuChoice
from imagekit.errors import ProbeFailedError

if TYPE_CHECKING:
    from imagekit.adapters.engine import DockerEngine
    from imagekit.adapters.results import RunFolder
    from imagekit.core.records import VerifyRecord
    from imagekit.orchestration.verify import Target, VerifySettings

NodesOption = Annotated[
    int,
    typer.Option(
        min=1,
        max=16,
        help="Also run the multi-node DDP probe (ddp_nodes) across this many nodes: "
        "containers of the image on a network of their own (verify), or torchrun processes "
        "on loopback (probe).",
    ),
]

# verify ----------------------------------------------------------------------


@app.command("verify")
def verify_command(
    images: Annotated[
        list[str] | None, typer.Argument(help="Images to verify (default: the matrix's).")
    ] = None,
    matrix: MatrixOption = Path("matrix.yaml"),
    only: OnlyOption = None,
    flavour: FlavourOption = None,
    platform: PlatformOption = None,
    gpus: GpusOption = GpuChoice.AUTO,
    probes: ProbesOption = None,
    timeout_s: TimeoutOption = None,
    shm_size: Annotated[int, typer.Option(help="/dev/shm bytes (NCCL needs >= 1 GiB).")] = (
        DEFAULT_SHM_BYTES
    ),
    structure: Annotated[bool, typer.Option(help="Run the structure checks (testinfra).")] = True,
    probes_dir: Annotated[
        Path | None, typer.Option(help="Run the probes of this folder instead of imagekit's.")
    ] = None,
    nodes: NodesOption = 1,
    results: ResultsOption = Path("results"),
    json_out: JsonOption = False,
) -> None:
    """Run the probes inside each image and record the results."""
    selection = Selection(
        matrix,
        tuple(only or ()),
        flavour.value if flavour else None,
        platform.value if platform else None,
    )
    dispatch(
        lambda: VerifyCommand(
            selection=selection,
            images=tuple(images or ()),
            gpus=gpus,
            probes=probe_names(probes),
            timeout_s=timeout_s,
            shm_bytes=shm_size,
            structure=structure,
            probes_dir=probes_dir,
            nodes=nodes,
            results=results,
            json=json_out,
        )
    )


@handles(VerifyCommand)
def verify(request: VerifyCommand) -> None:
    """Verify the images, print the summary, exit 5 when one did not pass."""
    from imagekit.adapters.containers import ContainerProbeRunner
    from imagekit.adapters.structure import DockerInspector
    from imagekit.core.compat import load_compat
    from imagekit.orchestration.verify import VerifyRun, probes_folder
    from imagekit.resources import probes_dir as bundled_probes

    targets = _targets(request)
    settings = verify_settings(request, probes_folder(request.probes_dir, bundled_probes()))
    client, engine, run = _open_run(request.results, targets)
    inspector = DockerInspector(client)
    runner = ContainerProbeRunner(client)
    verifier = VerifyRun(engine, runner, inspector, run, settings, plain_view(), load_compat())
    for note in verifier.notes():
        say(f"note: {note}")
    try:
        records = verifier.execute(targets)
    except KeyboardInterrupt:
        say(f"interrupted; finished images are recorded in {run.root}")
        raise
    _print_records(request.json, run, records)
    say(f"results: {run.root}")
    if (error := verifier.outcome_error(len(targets))) is not None:
        raise error


def step_summary_file() -> Path | None:
    """GitHub Actions' step summary (GITHUB_STEP_SUMMARY), where verify adds its summary."""
    value = os.environ.get("GITHUB_STEP_SUMMARY")
    return Path(value) if value else None


def verify_settings(request: VerifyCommand, probes_dir: Path) -> VerifySettings:
    """How to verify, from the request (`probes_dir`: the folder checked to have a runner)."""
    from imagekit.orchestration.verify import VerifySettings

    return VerifySettings(
        probes_dir=probes_dir,
        probes=request.probes,
        gpus=request.gpus,
        timeout_s=request.timeout_s,
        shm_bytes=request.shm_bytes,
        structure=request.structure,
        nodes=request.nodes,
        step_summary=step_summary_file(),
    )


def _open_run(results: Path, targets: list[Target]) -> tuple[Any, DockerEngine, RunFolder]:
    """The engine and a new run folder under `results`, its run.json written."""
    from imagekit.adapters.engine import DockerEngine, connect
    from imagekit.adapters.results import RunFolder, results_key

    RunFolder.check_writable(results)
    client = connect()
    engine = DockerEngine(client)
    note_leftovers(client)
    key = results_key()
    run = RunFolder.create(results, seal_key=key)
    facts = {"images": [t.reference for t in targets], "sealed_with_key": key is not None}
    run.write_run("verify", engine.info(), facts)
    return client, engine, run


def _print_records(as_json: bool, run: RunFolder, records: Mapping[str, VerifyRecord]) -> None:
    """The records of the run as JSON, or the run's summary table."""
    from imagekit.core.records import ImageRecord
    from imagekit.core.report import table
    from imagekit.core.summary import summary_rows

    if as_json:
        images = {n: ImageRecord(verify=r).to_json() for n, r in records.items()}
        print_json({"run_id": run.run_id, "images": images})
    else:
        typer.echo(table(*summary_rows(run.images())))


def _targets(request: VerifyCommand) -> list[Target]:
    """The images named on the command line, else the selected images of the matrix."""
    from imagekit.orchestration.verify import Target

    if request.images:
        return [Target(record_name(ref), ref) for ref in request.images]
    plans = request.selection.plans()
    return [Target(p.name, p.reference, p.required_probes, p.nodes) for p in plans]


# probe (host mode) -------------------------------------------------------------


@app.command("probe")
def probe_command(
    probes: ProbesOption = None,
    device: Annotated[ProbeDevice, typer.Option(help="Where the probes compute.")] = (
        ProbeDevice.AUTO
    ),
    timeout_s: TimeoutOption = None,
    nodes: NodesOption = 1,
    out: Annotated[
        Path | None, typer.Option(help="Also write the results JSON to this file.")
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Run the probes in this Python environment, no Docker (a doctor for GPU nodes)."""
    dispatch(lambda: ProbeCommand(probe_names(probes), device, timeout_s, nodes, out, json_out))


@handles(ProbeCommand)
def probe(request: ProbeCommand) -> None:
    """Run the probes here, print what they found, exit 5 when one did not pass."""
    from imagekit.adapters.hostprobe import HostProbeRunner
    from imagekit.adapters.results import write_json
    from imagekit.core.report import table
    from imagekit.orchestration.hostprobe import host_document, probe_here, result_rows
    from imagekit.resources import probes_dir

    run = probe_here(
        HostProbeRunner(),
        probes_dir(),
        request.probes,
        request.device,
        request.timeout_s,
        request.nodes,
    )
    document = host_document(run)
    if request.out is not None:
        write_json(request.out, document)
    if request.json:
        print_json(document)
    else:
        typer.echo(table(["PROBE", "STATUS", "REASON", "METRICS"], result_rows(run)))
        output = run.output
        say(
            f"{document['status']} on {output.device} ({output.device_reason}) in {run.wall_s:.1f}s"
        )
    if document["status"] is not Verdict.PASS:
        raise ProbeFailedError(f"probes failed on {run.output.device}")


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
    dispatch(lambda: ReportRequest(tuple(runs or ()), results, threshold))


@handles(ReportRequest)
def report(request: ReportRequest) -> None:
    """The summary of one run, or what got worse between two."""
    from imagekit.adapters.results import RunFolder
    from imagekit.core.report import table
    from imagekit.core.summary import changes, summary_rows

    folders = [RunFolder.open(f) for f in request.runs] or [RunFolder.newest(request.results)]
    loaded = [f.images() for f in folders]
    typer.echo(table(*summary_rows(loaded[-1])))
    say(f"run: {folders[-1].root}")
    if len(loaded) == 2:
        found = changes(loaded[0], loaded[1], request.threshold)
        for line in found:
            typer.echo(line)
        say(f"{len(found)} changes for the worse from {folders[0].run_id} to {folders[1].run_id}")
