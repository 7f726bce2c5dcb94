"""Compatibility knowledge: PyTorch releases, their CUDA variants, CUDA drivers, base OSes.

The facts live in `imagekit/data/compat.yaml` (each row with its sources); this
module loads them into frozen models and answers questions about them. Every
answer that rejects something says why and lists the valid choices.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from imagekit.errors import InputError

# Docker's platforms; this module's own `Platform` is a manylinux platform of the wheels.
from imagekit.kernel.vocabulary import Platform as DockerPlatform

CPU = "cpu"
PYPI_SIMPLE = "https://pypi.org/simple"


def version_key(version: str) -> tuple[int, ...]:
    """Sort key for dotted versions: "12.10" sorts after "12.9"."""
    return tuple(int(part) for part in version.split("."))


def variant_tag(cuda: str | None) -> str:
    """The wheel-index variant name: `cu128` for CUDA 12.8, `cpu` for none."""
    return CPU if cuda is None else "cu" + cuda.replace(".", "")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Source(_Frozen):
    title: str
    url: str


class Platform(_Frozen):
    glibc: str


class CudaFacts(_Frozen):
    """What one CUDA version needs and offers."""

    min_driver: str
    compat_driver_floor: str
    compiler_packages: tuple[str, ...]
    cuda_home: str
    dropped_archs: tuple[str, ...] = ()
    note: str = ""
    sources: tuple[str, ...]


class OsFacts(_Frozen):
    """What one base OS provides."""

    glibc: str
    python: tuple[str, ...]
    note: str = ""
    sources: tuple[str, ...]


class PythonRange(_Frozen):
    min: str
    max: str

    def contains(self, python: str) -> bool:
        """Whether `python` (major.minor) lies in the inclusive range."""
        return version_key(self.min) <= version_key(python) <= version_key(self.max)

    def __str__(self) -> str:
        return f"{self.min}-{self.max}"


class Arm64Build(_Frozen):
    """The linux/arm64 (aarch64, "sbsa") wheels of one CUDA build: where they are published
    and the GPU architectures compiled into them (Grace Hopper is sm_90, Grace Blackwell
    sm_100). cuDNN and NCCL are pinned as for x86_64: the same Requires-Dist."""

    index: Literal["pypi"]
    archs: tuple[str, ...]
    inferred: tuple[Literal["archs"], ...] = ()
    sources: tuple[str, ...]


class VariantFacts(_Frozen):
    """One CUDA build of one PyTorch release."""

    cudnn: str
    nccl: str
    archs: tuple[str, ...]
    experimental: bool = False
    inferred: tuple[Literal["cudnn", "nccl", "archs"], ...] = ()
    arm64: Arm64Build | None = None  # None: no linux/arm64 wheels of this build


class ReleaseFacts(_Frozen):
    """One PyTorch release."""

    python: PythonRange
    platform: str
    pypi_default_cuda: str
    variants: dict[str, VariantFacts]
    note: str = ""
    sources: tuple[str, ...]

    def cuda_versions(self) -> list[str]:
        """The CUDA versions this release has wheels for, oldest first."""
        return sorted(self.variants, key=version_key)


class CompatData(_Frozen):
    """The whole compatibility table."""

    schema_version: Literal[1]
    updated: str
    sources: dict[str, Source]
    index_url: str
    platforms: dict[str, Platform]
    cuda: dict[str, CudaFacts]
    os: dict[str, OsFacts]
    arch_lists: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    torch: dict[str, ReleaseFacts]

    @model_validator(mode="after")
    def _references_resolve(self) -> CompatData:
        known = set(self.sources)
        rows: list[tuple[str, tuple[str, ...]]] = [
            *((f"cuda {k}", v.sources) for k, v in self.cuda.items()),
            *((f"os {k}", v.sources) for k, v in self.os.items()),
            *((f"torch {k}", v.sources) for k, v in self.torch.items()),
            *(
                (f"torch {k} cu{c} arm64", b.arm64.sources)
                for k, v in self.torch.items()
                for c, b in v.variants.items()
                if b.arm64 is not None
            ),
        ]
        for name, refs in rows:
            missing = set(refs) - known
            if missing:
                raise ValueError(f"{name} cites unknown sources {sorted(missing)}")
            if not refs:
                raise ValueError(f"{name} cites no source")
        for torch, release in self.torch.items():
            if release.platform not in self.platforms:
                raise ValueError(f"torch {torch}: unknown platform {release.platform}")
            if release.pypi_default_cuda not in release.variants:
                raise ValueError(f"torch {torch}: PyPI default CUDA is not one of its variants")
            for cuda in release.variants:
                if cuda not in self.cuda:
                    raise ValueError(f"torch {torch}: CUDA {cuda} has no driver facts")
        return self

    # Queries -----------------------------------------------------------------

    def torch_versions(self) -> list[str]:
        """Known PyTorch releases, oldest first."""
        return sorted(self.torch, key=version_key)

    def require(self, torch: str) -> str:
        """`torch`, when it is a release imagekit knows; else `InputError` listing those."""
        if torch not in self.torch:
            raise InputError(
                f"torch {torch} is not a release imagekit knows",
                f"known releases: {', '.join(self.torch_versions())}",
            )
        return torch

    def index_url_for(self, cuda: str | None) -> str:
        """The PyTorch wheel index URL of a variant."""
        return self.index_url.format(variant=variant_tag(cuda))

    def glibc_floor(self, torch: str) -> str:
        """The minimum glibc the release's wheels need."""
        return self.platforms[self.torch[torch].platform].glibc

    def variant_choices(self, torch: str) -> str:
        """ "12.6, 12.8, 12.9 (and cpu)": the variants of a release, for messages."""
        return ", ".join(self.torch[torch].cuda_versions()) + " (and cpu)"

    def check_pair(self, torch: str, cuda: str | None) -> str | None:
        """None when `torch` has a build for `cuda` (None: CPU); else why not."""
        if torch not in self.torch:
            near = ", ".join(self.torch_versions())
            return f"torch {torch} is not a release imagekit knows; known releases: {near}"
        if cuda is None or cuda in self.torch[torch].variants:
            return None
        return f"torch {torch} has no CUDA {cuda} build; it has {self.variant_choices(torch)}"

    def platforms_of(self, torch: str, cuda: str | None) -> list[DockerPlatform]:
        """The Docker platforms a known torch/CUDA build has wheels for, amd64 first."""
        amd64, arm64 = DockerPlatform.AMD64, DockerPlatform.ARM64
        if cuda is None:
            return [amd64]
        return [amd64] + ([arm64] if self.torch[torch].variants[cuda].arm64 else [])

    def check_platform(self, torch: str, cuda: str | None, platform: str) -> str | None:
        """None when a known torch/CUDA build has wheels for `platform`; else why not."""
        if platform in self.platforms_of(torch, cuda):
            return None
        what = f"CUDA {cuda}" if cuda else "CPU"
        others = [
            c for c in self.torch[torch].cuda_versions() if platform in self.platforms_of(torch, c)
        ]
        where = (
            f"; its {platform} wheels are the CUDA {', '.join(others)} build"
            if others
            else f"; it knows none of torch {torch}"
        )
        return f"imagekit's data knows no {platform} wheels of torch {torch} ({what}){where}"

    def archs_for(self, torch: str, cuda: str, platform: str) -> tuple[str, ...]:
        """The GPU architectures compiled into a build's wheels for `platform`."""
        variant = self.torch[torch].variants[cuda]
        if platform != DockerPlatform.ARM64:
            return variant.archs
        if variant.arm64 is None:
            raise ValueError(f"torch {torch} CUDA {cuda} has no {platform} wheels")
        return variant.arm64.archs

    def index_url_on(self, cuda: str | None, platform: str, torch: str) -> str:
        """Where a build's wheels for `platform` are published."""
        if cuda is not None and platform == DockerPlatform.ARM64:
            build = self.torch[torch].variants[cuda].arm64
            if build is not None and build.index == "pypi":
                return PYPI_SIMPLE
        return self.index_url_for(cuda)

    def check_python(self, torch: str, python: str) -> str | None:
        """None when the release has wheels for `python`; else why not."""
        rng = self.torch[torch].python
        if rng.contains(python):
            return None
        return f"torch {torch} has no wheels for Python {python}; it supports Python {rng}"

    def check_os(self, torch: str, os_name: str, python: str) -> list[str]:
        """Reasons (possibly none) why `os_name` cannot host this torch + Python."""
        if os_name not in self.os:
            return [f"unknown base OS {os_name!r}; known: {', '.join(sorted(self.os))}"]
        facts = self.os[os_name]
        reasons = []
        floor = self.glibc_floor(torch)
        if version_key(facts.glibc) < version_key(floor):
            newer = [
                n for n, o in sorted(self.os.items()) if version_key(o.glibc) >= version_key(floor)
            ]
            reasons.append(
                f"{os_name} has glibc {facts.glibc} but the torch {torch} wheels "
                f"({self.torch[torch].platform}) need glibc >= {floor}; "
                f"use one of {', '.join(newer)}"
            )
        if python not in facts.python:
            hosts = [n for n, o in sorted(self.os.items()) if python in o.python]
            where = f"; Python {python} comes with {', '.join(hosts)}" if hosts else ""
            reasons.append(
                f"{os_name} provides Python {', '.join(facts.python)}, not {python}{where}"
            )
        return reasons

    def check_archs(self, cuda: str | None, archs: tuple[str, ...]) -> str | None:
        """None when CUDA `cuda` can target every architecture in `archs`; else why not."""
        if cuda is None:
            return None
        dropped = sorted(set(archs) & set(self.cuda[cuda].dropped_archs))
        if not dropped:
            return None
        return (
            f"CUDA {cuda} cannot target {', '.join(dropped)} (removed in CUDA "
            f"{cuda.split('.')[0]}); those GPUs need a CUDA 12.x variant"
        )


def compat_path() -> Path:
    """Where the compatibility data imagekit ships lies (in a checkout: imagekit/data/)."""
    return Path(str(resources.files("imagekit").joinpath("data/compat.yaml")))


@cache
def load_compat() -> CompatData:
    """The compatibility data shipped with imagekit (validated once, then cached)."""
    text = resources.files("imagekit").joinpath("data/compat.yaml").read_text(encoding="utf-8")
    return CompatData.model_validate(yaml.safe_load(text))
