"""What `imagekit verify` verifies (its targets), and what is checked of the request before
a run: `verify/run.py` carries it out, with the request's `VerifySettings`, once
`check_present` has seen that the engine holds something to verify.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from imagekit.errors import InputError
from imagekit.kernel.engine import Engine
from imagekit.kernel.reference import record_name
from imagekit.matrix.selection import Selection


@dataclass(frozen=True)
class Target:
    """One image to verify: a record name, the reference to run, and what must pass."""

    name: str
    reference: str
    required: tuple[str, ...] = ()
    nodes: int = 1  # >1: the multi-node probe runs too, and is required


def targets_of(images: Sequence[str], selection: Selection) -> list[Target]:
    """The images named on the command line, else the selected images of the matrix (read
    only then)."""
    if images:
        return [Target(record_name(ref), ref) for ref in images]
    return [Target(p.name, p.reference, p.required_probes, p.nodes) for p in selection.plans()]


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


def check_probes_folder(folder: Path) -> None:
    """InputError when the probes folder to run (`VerifySettings.probes_folder`) has no runner
    to run them with."""
    if not (folder / "_runner.py").is_file():
        raise InputError(
            f"--probes-dir {folder} has no _runner.py",
            "copy imagekit's probes/ folder and add your probes beside them",
        )
