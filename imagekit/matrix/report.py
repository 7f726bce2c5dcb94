"""Pure formatting of plans and compatibility facts for people and machines."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypedDict

from imagekit.errors import InputError
from imagekit.kernel.text import table
from imagekit.matrix.compat import CPU, CompatData
from imagekit.matrix.plan import ImagePlan
from imagekit.matrix.requests import MatrixFormat

if TYPE_CHECKING:
    from imagekit.matrix.load import Matrix


class PlanRow(TypedDict):
    """One image of `imagekit matrix --format json|github` (a GitHub Actions matrix entry)."""

    image: str
    cell: str
    flavour: str
    torch: str
    cuda: str
    cudnn: str
    nccl: str
    python: str
    os: str
    platform: str
    base: str
    tag: str
    aliases: list[str]
    reference: str
    repository: str
    slim_reference: str
    slim_tag: str
    min_driver: str
    gpu: bool
    candidate_suffix: str


def plan_row(plan: ImagePlan, platforms: int = 1) -> PlanRow:
    """One image as a flat dict (the `--format json|github` entries); `platforms`: how many
    platforms its image has (more than one: its CI candidate carries the platform, `-arm64`)."""
    cell = plan.cell
    return {
        "image": plan.name,
        "cell": cell.id,
        "flavour": plan.flavour,
        "torch": cell.torch,
        "cuda": cell.cuda or CPU,
        "cudnn": cell.cudnn or "",
        "nccl": cell.nccl or "",
        "python": cell.python,
        "os": cell.os,
        "platform": plan.platform,
        "base": cell.base_image,
        "tag": plan.tag,
        "aliases": list(plan.aliases),
        "reference": plan.reference,
        "repository": plan.repository,
        "slim_reference": plan.slim_reference,
        "slim_tag": plan.slim_reference.rsplit(":", 1)[1],
        "min_driver": cell.min_driver or "",
        "gpu": cell.cuda is not None,
        "candidate_suffix": f"-{plan.platform.split('/')[1]}" if platforms > 1 else "",
    }


def plan_rows(plans: Sequence[ImagePlan], every: Sequence[ImagePlan]) -> list[PlanRow]:
    """The rows of `plans`, each counting its image's platforms among `every` plan of the
    matrix (a selection may hold one platform of an image that has two)."""
    platforms = Counter((p.repository, p.tag) for p in every)
    return [plan_row(p, platforms[(p.repository, p.tag)]) for p in plans]


def plans_table(plans: list[ImagePlan]) -> str:
    """An aligned text table of images, one per line."""
    header = ["IMAGE", "TORCH", "CUDA", "CUDNN", "NCCL", "PY", "OS", "PLATFORM", "TAG"]
    rows = [
        [
            p.name,
            p.cell.torch,
            p.cell.cuda or CPU,
            p.cell.cudnn or "-",
            p.cell.nccl or "-",
            p.cell.python,
            p.cell.os,
            p.platform,
            p.tag + (f" (+{', '.join(p.aliases)})" if p.aliases else ""),
        ]
        for p in plans
    ]
    return table(header, rows)


def plans_output(format: MatrixFormat, plans: list[ImagePlan], every: Sequence[ImagePlan]) -> str:
    """What `imagekit matrix` prints on stdout: the table, the rows as JSON, or GitHub's job
    matrix (compact, one line: what $GITHUB_OUTPUT and fromJSON() take)."""
    if format == MatrixFormat.table:
        return plans_table(plans)
    rows = plan_rows(plans, every)
    if format == MatrixFormat.github:
        return json.dumps({"include": rows}, sort_keys=True, separators=(",", ":"))
    return json.dumps(rows, indent=2, sort_keys=True)


def compat_output(data: CompatData, releases: list[str], as_json: bool) -> str:
    """What `imagekit compat` prints: each release's data as JSON, or the table."""
    if as_json:
        document = {t: data.torch[t].model_dump(mode="json") for t in releases}
        return json.dumps(document, indent=2, sort_keys=True)
    header, rows = compat_rows(data, releases)
    return table(header, rows)


def compat_rows(data: CompatData, releases: list[str]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the compatibility table: one row per release x CUDA variant."""
    header = ["TORCH", "PYTHON", "GLIBC>=", "CUDA", "CUDNN", "NCCL", "MIN DRIVER", "ARCHS"]
    rows = []
    for torch in releases:
        release = data.torch[torch]
        for cuda in release.cuda_versions():
            v = release.variants[cuda]
            mark = "*" if v.experimental else ""
            default = " (PyPI default)" if cuda == release.pypi_default_cuda else ""
            rows.append(
                [
                    torch,
                    str(release.python),
                    data.glibc_floor(torch),
                    f"{cuda}{mark}{default}",
                    v.cudnn + ("~" if "cudnn" in v.inferred else ""),
                    v.nccl + ("~" if "nccl" in v.inferred else ""),
                    data.cuda[cuda].min_driver,
                    f"{v.archs[0]}..{v.archs[-1]}" if v.archs else "-",
                ]
            )
        rows.append([torch, str(release.python), data.glibc_floor(torch), CPU, "-", "-", "-", "-"])
    return header, rows


def explain_cell(
    data: CompatData, torch: str, cuda: str, python: str | None, os_name: str | None
) -> tuple[dict[str, str], list[str]]:
    """What a (torch, cuda[, python, os]) cell derives to, and every reason it cannot be built."""
    cuda_version = None if cuda == CPU else cuda
    reasons: list[str] = []
    if (why := data.check_pair(torch, cuda_version)) is not None:
        return {"torch": torch, "cuda": cuda}, [why]
    release = data.torch[torch]
    facts = {
        "torch": torch,
        "variant": "cpu" if cuda_version is None else "cu" + cuda_version.replace(".", ""),
        "python range": str(release.python),
        "wheel platform": release.platform,
        "glibc floor": data.glibc_floor(torch),
        "index url": data.index_url_for(cuda_version),
    }
    if cuda_version is not None:
        variant = release.variants[cuda_version]
        cfacts = data.cuda[cuda_version]
        facts |= {
            "cuda": cuda_version + (" (experimental)" if variant.experimental else ""),
            "cudnn": variant.cudnn,
            "nccl": variant.nccl + (" (inferred)" if "nccl" in variant.inferred else ""),
            "min driver": cfacts.min_driver,
            "compat floor": cfacts.compat_driver_floor,
            "gpu archs": " ".join(variant.archs),
        }
    if python is not None:
        facts["python"] = python
        if (why := data.check_python(torch, python)) is not None:
            reasons.append(why)
    if os_name is not None:
        facts["os"] = os_name
        reasons += (
            data.check_os(torch, os_name, python or "")
            if python
            else [r for r in data.check_os(torch, os_name, "") if "glibc" in r or "unknown" in r]
        )
    return facts, reasons


class FindingJson(TypedDict):
    """One finding of the Dockerfile linter, as `imagekit check --json` shows it."""

    image: str
    line: int
    code: str
    level: str
    message: str


class LintFinding(Protocol):
    """A finding of the Dockerfile linter (hadolint's: `adapters/lint.py`)."""

    @property
    def fails(self) -> bool:
        """Whether it fails `imagekit check`."""
        ...

    def to_json(self) -> FindingJson:
        """As `imagekit check --json` shows it."""
        ...

    def format(self) -> str:
        """As `imagekit check` says it: `image/Dockerfile:line: level CODE message`."""
        ...


class CheckDocument(TypedDict):
    """`imagekit check --json`."""

    matrix: str
    cells: int
    images: int
    dockerfiles_linted: int
    findings: list[FindingJson]
    warnings: list[str]
    ok: bool


def check_lines(loaded: Matrix, findings: Sequence[LintFinding]) -> list[str]:
    """What `imagekit check` says on stderr before its verdict: the warnings, each finding."""
    return [*(f"warning: {w.format()}" for w in loaded.warnings), *(f.format() for f in findings)]


def check_document(
    matrix: str, loaded: Matrix, findings: Sequence[LintFinding], linted: int
) -> CheckDocument:
    """`imagekit check --json`: the matrix's counts, hadolint's findings, the warnings."""
    return {
        "matrix": matrix,
        "cells": len(loaded.cells),
        "images": len(loaded.plans),
        "dockerfiles_linted": linted,
        "findings": [f.to_json() for f in findings],
        "warnings": [w.format() for w in loaded.warnings],
        "ok": not any(f.fails for f in findings),
    }


def check_passed(matrix: str, loaded: Matrix, linted: int) -> str:
    """`imagekit check`'s last line when nothing failed."""
    cells, images = len(loaded.cells), len(loaded.plans)
    return f"{matrix}: ok: {cells} cells, {images} images, {linted} Dockerfiles lint clean"


def lint_refusal(failing: int) -> InputError | None:
    """Why `imagekit check` fails when `failing` of hadolint's findings fail (None: none)."""
    if not failing:
        return None
    return InputError(
        f"hadolint reported {failing} problems in the rendered Dockerfiles",
        "fix templates/Dockerfile.j2, or ignore a rule with its reason in "
        "imagekit/data/hadolint.yaml",
    )
