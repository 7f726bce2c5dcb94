"""The requests of the commands that prove images: verify, probe, report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from imagekit.errors import InputError
from imagekit.kernel.options import GPUS, JSON, NODES, PROBES, RESULTS, TIMEOUT, Arg, Opt
from imagekit.kernel.runtime import DEFAULT_SHM_BYTES, GpuChoice, time_limit
from imagekit.kernel.vocabulary import Runtime
from imagekit.matrix.selection import Selection
from imagekit.resources import probes_dir
from imagekit.verify.probe_contract import ProbeDevice
from imagekit.verify.runtimes import runtime_problem
from imagekit.verify.slurm import SlurmAsk


@dataclass(frozen=True)
class VerifySettings:
    """How `imagekit verify` verifies: its options, taken by `VerifyRun` as they are."""

    gpus: Annotated[GpuChoice, GPUS] = GpuChoice.AUTO
    probes: Annotated[tuple[str, ...], PROBES] = ()
    timeout_s: Annotated[float | None, TIMEOUT] = None
    shm_bytes: Annotated[int, Opt("--shm-size", help="/dev/shm bytes (NCCL needs >= 1 GiB).")] = (
        DEFAULT_SHM_BYTES
    )
    structure: Annotated[
        bool, Opt("--structure/--no-structure", help="Run the structure checks (testinfra).")
    ] = True
    probes_dir: Annotated[
        Path | None,
        Opt("--probes-dir", help="Run the probes of this folder instead of imagekit's."),
    ] = None
    nodes: Annotated[int, NODES] = 1
    runtime: Annotated[
        Runtime,
        Opt(
            "--runtime",
            choices=Runtime,
            help="What runs the probes: the engine's containers (docker), or an HPC runtime on "
            "the image exported from the engine, as you (charliecloud: ch-run).",
        ),
    ] = Runtime.DOCKER
    slurm: Annotated[
        bool,
        Opt(
            "--slurm",
            help="Run each image's probes as a Slurm job under --runtime, on the image exported "
            "into --results (the nodes must share it); --nodes N: a job of N nodes.",
        ),
    ] = False
    partition: Annotated[str | None, Opt("--partition", help="The jobs' Slurm partition.")] = None
    account: Annotated[str | None, Opt("--account", help="The jobs' Slurm account.")] = None
    time_limit_min: Annotated[
        int | None,
        Opt(
            "--time-limit",
            min=1,
            help="The jobs' time limit in minutes (default: the probes' own, plus 2).",
        ),
    ] = None
    gpus_per_node: Annotated[
        int, Opt("--gpus-per-node", min=0, help="GPUs each job asks Slurm for, per node.")
    ] = 0
    pending_limit_min: Annotated[
        int | None, Opt("--pending-limit", min=1, help="Cancel a job pending this many minutes.")
    ] = None

    def __post_init__(self) -> None:
        time_limit("--timeout-s", self.timeout_s)
        asked = self.slurm_ask.options_given()
        if problem := runtime_problem(self.runtime, self.slurm, self.nodes, asked):
            raise InputError(*problem)
        if self.shm_bytes < 1:
            raise InputError(
                f"--shm-size {self.shm_bytes} is not a size in bytes", "e.g. 2147483648"
            )

    @property
    def slurm_ask(self) -> SlurmAsk:
        """Where and how long the Slurm jobs may run."""
        return SlurmAsk(self.partition, self.account, self.time_limit_min, self.gpus_per_node,
                        self.pending_limit_min)  # fmt: skip

    @property
    def probes_folder(self) -> Path:
        """The probes to run: `--probes-dir`'s, else imagekit's own."""
        return self.probes_dir or probes_dir()


@dataclass(frozen=True)
class VerifyCommand:
    """Run the probes inside each image and record the results."""

    selection: Selection
    images: Annotated[tuple[str, ...], Arg(help="Images to verify (default: the matrix's).")] = ()
    settings: VerifySettings = field(default_factory=VerifySettings)
    results: Annotated[Path, RESULTS] = Path("results")
    json: Annotated[bool, JSON] = False

    def __post_init__(self) -> None:
        self.selection.beside(self.images)


@dataclass(frozen=True)
class ProbeSettings:
    """How `imagekit probe` probes: its options, taken by `probe_here` as they are."""

    probes: Annotated[tuple[str, ...], PROBES] = ()
    device: Annotated[ProbeDevice, Opt("--device", help="Where the probes compute.")] = (
        ProbeDevice.AUTO
    )
    timeout_s: Annotated[float | None, TIMEOUT] = None
    nodes: Annotated[int, NODES] = 1

    def __post_init__(self) -> None:
        time_limit("--timeout-s", self.timeout_s)


@dataclass(frozen=True)
class ProbeCommand:
    """Run the probes in this Python environment, no Docker (a doctor for GPU nodes)."""

    settings: ProbeSettings = field(default_factory=ProbeSettings)
    out: Annotated[Path | None, Opt("--out", help="Also write the results JSON to this file.")] = (
        None
    )
    json: Annotated[bool, JSON] = False


@dataclass(frozen=True)
class ReportRequest:
    """Show a run's summary table; with two runs, what got worse from the first to the second."""

    runs: Annotated[
        tuple[Path, ...],
        Arg(help="Run folders or run ids under --results (default: the newest); two: compare."),
    ] = ()
    results: Annotated[Path, RESULTS] = Path("results")
    threshold: Annotated[
        float, Opt("--threshold", help="A metric change worse than this fraction is reported.")
    ] = 0.2
    html: Annotated[
        Path | None,
        Opt(
            "--html",
            metavar="DIR",
            help="Write the runs under --results as a static site to DIR (index.html: the "
            "matrix, each image's page, figures across runs) instead of the table.",
        ),
    ] = None

    def __post_init__(self) -> None:
        if len(self.runs) > 2:
            raise InputError("report takes one run, or two to compare")
        if self.html is not None and self.runs:
            raise InputError(
                "report --html makes the site of every run under --results; name no run",
                "pass --results DIR with the runs to show",
            )
