"""Does an image agree with what it claims? One owner for every such comparison. Pure.

- `compare`: the versions an image reports from inside (the env probe's facts) against an
  identity (from its labels, or from the tag a plan gives it): torch without its `+local` part,
  Python major.minor, CUDA, cuDNN major. The structure checks and the publish gate both use it.
- `glibc_floor_met`: the image's glibc against its `glibc-floor` label, which is a floor (the
  oldest glibc its torch wheels need), not a version the image must equal.
- `label_checks`: an image's CUDA labels and NVIDIA_* variables against the compatibility data.
  Labels are what schedulers, `imagekit doctor` and people read before they pull an image, so a
  label that disagrees with the data misleads everyone downstream.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from imagekit.kernel import labels as L
from imagekit.kernel.json import JsonValue
from imagekit.kernel.labels import ImageLabels
from imagekit.kernel.records import Check
from imagekit.kernel.vocabulary import Platform
from imagekit.matrix.compat import CompatData, version_key
from imagekit.matrix.plan import Cell, nvidia_require_cuda


@dataclass(frozen=True)
class Identity:
    """What an image is said to be: by its labels, or by the tag a plan gives it."""

    torch: str
    python: str
    cuda: str | None
    cudnn_major: str | None

    @classmethod
    def from_labels(cls, labels: ImageLabels) -> Identity:
        """What the image's own labels say."""
        return cls(labels.torch, labels.python, labels.cuda, labels.cudnn_major)

    @classmethod
    def from_cell(cls, cell: Cell) -> Identity:
        """What the tag of a cell's image says."""
        return cls(cell.torch, cell.python, cell.cuda, cell.cudnn_major)


def _public(version: object) -> str:
    """torch's public version: `2.13.0+cpu` -> `2.13.0`."""
    return str(version or "").split("+")[0]


def _minor(version: object) -> str:
    return ".".join(str(version or "").split(".")[:2])


def compare(want: Identity, facts: Mapping[str, JsonValue], source: str = "label") -> list[Check]:
    """One check per version `want` names, against the env probe's `facts`.

    `source` says who claims the identity (`label`, `tag`), for the person reading a failure.
    A fact the probe did not report is not compared (an older probe, or no env probe run).
    """
    rows: list[tuple[str, str, JsonValue, bool]] = []  # what, claimed, seen, whether they agree
    if "torch" in facts:
        seen = _public(facts["torch"])
        rows.append(("torch", want.torch, seen, seen == want.torch))
    if "python" in facts:
        seen = _minor(facts["python"])
        rows.append(("Python", want.python, seen, seen == want.python))
    if "cuda" in facts:
        seen_cuda = facts["cuda"] or None
        rows.append(("CUDA", want.cuda or "none", seen_cuda, seen_cuda == want.cuda))
    if want.cudnn_major is not None and "cudnn" in facts:
        seen = str(facts.get("cudnn") or "").split(".")[0]
        rows.append(("cuDNN", want.cudnn_major, facts.get("cudnn"), seen == want.cudnn_major))
    return [
        Check(
            name=f"{what} {source} agrees with the image",
            ok=ok,
            detail=f"{source} says {what} {claimed}, the image has {seen or 'none'}",
        )
        for what, claimed, seen, ok in rows
    ]


def disagreements(want: Identity, facts: Mapping[str, JsonValue], source: str) -> list[str]:
    """Only what differs, as sentences."""
    return [c.detail for c in compare(want, facts, source) if not c.ok]


def glibc_floor_met(seen: object, floor: str) -> bool | None:
    """Whether the glibc the env probe saw (`glibc 2.36`, as glibc names itself) is at least
    `floor` (the `glibc-floor` label, `2.28`); None where either holds no version."""
    found = [re.search(r"\d+(\.\d+)+", str(v or "")) for v in (seen, floor)]
    if found[0] is None or found[1] is None:
        return None
    return version_key(found[0].group()) >= version_key(found[1].group())


def label_checks(
    labels: dict[str, str], env: dict[str, str], data: CompatData, platform: str = ""
) -> list[Check]:
    """Checks that the CUDA labels and NVIDIA_* variables of an image match the data for
    the image's `platform` (the engine's `linux/arm64`; "" when it did not say: amd64).

    A CPU image must carry neither CUDA labels nor NVIDIA_REQUIRE_CUDA.
    """
    checks: list[Check] = []

    def add(name: str, ok: bool, detail: str) -> None:
        checks.append(Check(name=name, ok=bool(ok), detail=detail))

    cuda = labels.get(L.CUDA)
    torch = labels.get(L.TORCH, "")
    platform = "/".join(platform.split("/")[:2]) or Platform.AMD64  # linux/arm64/v8 -> linux/arm64
    # An unknown torch or CUDA is reported below, on its own; a known build on a platform it
    # has no wheels for (a CPU torch on arm64, say) is reported here.
    known = torch in data.torch
    build = cuda if known and cuda in data.torch[torch].variants else None
    if known and (why := data.check_platform(torch, build, platform)):
        add("the compatibility data knows this build on this platform", False, why)
        return checks
    if not cuda:
        prefix = len(L.PREFIX)
        stray = sorted(k[prefix:] for k in (L.CUDNN, L.NCCL, L.MIN_DRIVER) if labels.get(k))
        stray += ["NVIDIA_REQUIRE_CUDA"] if "NVIDIA_REQUIRE_CUDA" in env else []
        add("a CPU image carries no CUDA labels", not stray, f"found {stray}" if stray else "none")
        return checks

    return checks + _cuda_checks(labels, env, data, torch, cuda, platform)


def _cuda_checks(
    labels: Mapping[str, str],
    env: Mapping[str, str],
    data: CompatData,
    torch: str,
    cuda: str,
    platform: str,
) -> list[Check]:
    """A CUDA image's labels and NVIDIA_* variables against the data for its torch and CUDA."""
    checks: list[Check] = []

    def add(name: str, ok: bool, detail: str) -> None:
        checks.append(Check(name=name, ok=bool(ok), detail=detail))

    problem = data.check_pair(torch, cuda)
    if problem:
        add(
            "the compatibility data knows this torch and CUDA", False, f"{problem}; update imagekit"
        )
        return checks
    variant = data.torch[torch].variants[cuda]
    archs = data.archs_for(torch, cuda, platform)
    driver = data.cuda[cuda].min_driver

    def agree(key: str, want: str) -> None:
        seen = labels.get(key)
        name = key.removeprefix(L.PREFIX)
        add(f"label {name} agrees with the data", seen == want, f"label {seen!r}, data {want!r}")

    agree(L.MIN_DRIVER, driver)
    agree(L.CUDNN, variant.cudnn)
    agree(L.NCCL, variant.nccl)
    seen_archs = labels.get(L.CUDA_ARCHS, "").split()
    missing = [a for a in archs if a not in seen_archs]
    extra = [a for a in seen_archs if a not in archs]
    add(
        "label cuda-archs agrees with the data",
        not missing and not extra,
        f"label lacks {missing}, adds {extra}"
        if missing or extra
        else f"{' '.join(seen_archs)} (torch {torch} cu{cuda.replace('.', '')}, {platform})",
    )
    want_require = nvidia_require_cuda(cuda)
    seen_require = env.get("NVIDIA_REQUIRE_CUDA")
    add(
        "NVIDIA_REQUIRE_CUDA matches the CUDA of the image",
        seen_require == want_require,
        f"env {seen_require!r}, expected {want_require!r}",
    )
    capabilities = set(env.get("NVIDIA_DRIVER_CAPABILITIES", "").split(","))
    add(
        "NVIDIA_DRIVER_CAPABILITIES include compute and utility",
        {"compute", "utility"} <= capabilities or "all" in capabilities,
        env.get("NVIDIA_DRIVER_CAPABILITIES", "unset"),
    )
    return checks
