"""Following upstream: the refresh of the matrix from package indexes, and compat.yaml checked
against the torch wheels on hand. Over the `PackageIndex` and `Wheelhouse` ports; the reading of
facts and the proposal are the core's (`upstream/metadata.py`, `upstream/refresh.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagekit.errors import InputError, Problem
from imagekit.upstream.metadata import (
    CompatSource,
    WheelFacts,
    disagreements,
    group_releases,
    wanted,
    wheel_facts,
)
from imagekit.upstream.ports import PackageIndex, Wheelhouse
from imagekit.upstream.refresh import Proposal, floor_of, propose

PROJECT = "torch"


def refresh_matrix(
    index: PackageIndex,
    indexes: tuple[str, ...],
    matrix: tuple[str, str],
    compat: CompatSource,
    since: str | None = None,
) -> Proposal:
    """What `indexes` hold that the matrix (file, text) and compat.yaml lack, as a proposal.
    Only the wheels of the releases that count are read (their METADATA costs a request or
    a few each)."""
    floor = floor_of(matrix[1], since)
    wheels: list[WheelFacts] = []
    for url in indexes:
        files = index.files(url, PROJECT)
        for file in wanted(files, floor):
            facts = wheel_facts(file.filename, file.sha256, index.metadata(file))
            if facts is not None:
                wheels.append(facts)
    return propose(group_releases(wheels), matrix[0], matrix[1], compat, since=floor)


@dataclass(frozen=True)
class CompatCheck:
    """What the wheels on hand confirmed, what was skipped and why, and every disagreement."""

    confirmed: tuple[str, ...]
    skipped: tuple[str, ...]
    problems: tuple[Problem, ...]


def _summary(wheel: WheelFacts) -> str:
    what = f"CUDA {wheel.cuda}: cuDNN {wheel.cudnn}, NCCL {wheel.nccl}" if wheel.cuda else "cpu"
    return (
        f"{wheel.filename}: agrees: torch {wheel.torch} {what}, Python {wheel.python}, "
        f"{wheel.machine} {wheel.platform} (sha256:{wheel.sha256})"
    )


def verify_compat(
    house: Wheelhouse, folders: tuple[Path, ...], compat: CompatSource
) -> CompatCheck:
    """Every fact of compat.yaml that a torch wheel in `folders` can confirm, checked against
    that wheel's METADATA. `InputError` when no folder holds a wheel to check."""
    confirmed, skipped, problems = [], [], []
    for folder in folders:
        wheels = house.torch_wheels(folder)
        if wheels is None:
            skipped.append(f"{folder}: skipped: no such folder")
            continue
        if not wheels:
            skipped.append(f"{folder}: skipped: no torch wheel in it")
        for wheel in wheels:
            facts = wheel_facts(wheel.filename, wheel.sha256, wheel.metadata)
            if facts is None:
                skipped.append(f"{wheel.filename}: skipped: not a Linux CPU or CUDA build")
            elif facts.torch not in compat.data.torch:
                skipped.append(f"{wheel.filename}: skipped: compat.yaml has no torch {facts.torch}")
            elif found := disagreements(facts, compat):
                problems += found
            else:
                confirmed.append(_summary(facts))
    if not confirmed and not problems:
        where = ", ".join(map(str, folders)) or "no --wheelhouse"
        raise InputError(
            f"{where}: no torch wheel to check compat.yaml against; give a "
            "--wheelhouse that holds one (make wheelhouse)"
        )
    return CompatCheck(tuple(confirmed), tuple(skipped), tuple(problems))
