"""What `imagekit verify` is asked to do: the images (targets) and how to verify them.

Made from the request before any engine is reached; `verify/run.py` carries it out, once
`check_present` has seen that the engine holds something to verify.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from imagekit.errors import InputError
from imagekit.kernel.engine import Engine
from imagekit.kernel.runtime import DEFAULT_SHM_BYTES, GpuChoice
from imagekit.matrix.plan import ImagePlan
from imagekit.verify.requests import VerifyCommand


@dataclass(frozen=True)
class Target:
    """One image to verify: a record name, the reference to run, and what must pass."""

    name: str
    reference: str
    required: tuple[str, ...] = ()
    nodes: int = 1  # >1: the multi-node probe runs too, and is required


@dataclass(frozen=True)
class VerifySettings:
    """How to verify."""

    probes_dir: Path
    probes: tuple[str, ...] = ()
    gpus: GpuChoice = GpuChoice.AUTO
    timeout_s: float | None = None
    shm_bytes: int = DEFAULT_SHM_BYTES
    structure: bool = True
    nodes: int = 1  # >1: every image also runs the multi-node probe across this many nodes
    step_summary: Path | None = None  # GitHub's step summary file: the summary is added to it

    @classmethod
    def of(
        cls, request: VerifyCommand, probes_dir: Path, step_summary: Path | None
    ) -> VerifySettings:
        """How to verify, from the request (`probes_dir`: the folder checked to have a runner)."""
        return cls(
            probes_dir=probes_dir,
            probes=request.probes,
            gpus=request.gpus,
            timeout_s=request.timeout_s,
            shm_bytes=request.shm_bytes,
            structure=request.structure,
            nodes=request.nodes,
            step_summary=step_summary,
        )


def record_name(reference: str) -> str:
    """A file-safe record name for an image named on the command line."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", reference.split("/")[-1]).strip("_") or "image"


def targets_of(images: Sequence[str], plans: Sequence[ImagePlan]) -> list[Target]:
    """The images named on the command line, else the selected images of the matrix."""
    if images:
        return [Target(record_name(ref), ref) for ref in images]
    return [Target(p.name, p.reference, p.required_probes, p.nodes) for p in plans]


def check_present(targets: Sequence[Target], engine: Engine) -> None:
    """InputError when none of `targets` is in the engine: a run that could record nothing is
    bad input, refused before its run folder is made. Where some are there, each missing one
    is recorded as not verified (`VerifyRun`) and the others go on."""
    if not targets or any(engine.inspect_image(t.reference) is not None for t in targets):
        return
    if len(targets) == 1:
        raise InputError(
            f"image {targets[0].reference} is not in the engine",
            "build it first (imagekit build) or pull it",
        )
    raise InputError(
        f"none of the {len(targets)} images is in the engine: "
        + ", ".join(t.reference for t in targets),
        "build them first (imagekit build) or pull them",
    )


def probes_folder(asked: Path | None, bundled: Path) -> Path:
    """The probes folder to run (`--probes-dir`, else imagekit's own); InputError when it has
    no runner to run them with."""
    folder = asked or bundled
    if not (folder / "_runner.py").is_file():
        raise InputError(
            f"--probes-dir {folder} has no _runner.py",
            "copy imagekit's probes/ folder and add your probes beside them",
        )
    return folder
