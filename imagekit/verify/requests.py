"""The requests of the commands that prove images: verify, probe, report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from imagekit.errors import InputError
from imagekit.kernel.options import GPUS, JSON, NODES, PROBES, RESULTS, TIMEOUT, Arg, Opt
from imagekit.kernel.runtime import DEFAULT_SHM_BYTES, GpuChoice, time_limit
from imagekit.matrix.selection import Selection
from imagekit.resources import probes_dir
from imagekit.verify.probe_contract import ProbeDevice


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

    def __post_init__(self) -> None:
        time_limit("--timeout-s", self.timeout_s)
        if self.shm_bytes < 1:
            raise InputError(
                f"--shm-size {self.shm_bytes} is not a size in bytes", "e.g. 2147483648"
            )

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
