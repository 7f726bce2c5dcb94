"""A `docker-bake.json` for the whole plan (pure), so any BuildKit builder can build the matrix.

Each image is a target; a full target takes its slim target as a named context
under the slim image's reference, so `FROM ${SLIM_IMAGE}` resolves to the slim
target built in the same bake, with no registry round trip.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import NotRequired, TypedDict

from imagekit.build.render import RenderedImage
from imagekit.build.reproducible import SOURCE_DATE_EPOCH
from imagekit.kernel import labels as L
from imagekit.kernel.vocabulary import Flavour
from imagekit.matrix.plan import ImagePlan, platform_suffix


class BakeTarget(TypedDict):
    """One target of a bake file (the keys `docker buildx bake` reads)."""

    context: str
    dockerfile: str
    tags: list[str]
    platforms: list[str]
    args: dict[str, str]
    labels: dict[str, str]
    contexts: NotRequired[dict[str, str]]  # a full image's slim, as the target that builds it
    secret: NotRequired[list[str]]


class BakeGroup(TypedDict):
    """A named set of targets (`docker buildx bake slim`)."""

    targets: list[str]


class BakeFile(TypedDict):
    """A `docker-bake.json`."""

    group: dict[str, BakeGroup]
    target: dict[str, BakeTarget]


def target_name(plan: ImagePlan) -> str:
    """A bake target name for a plan (bake allows letters, digits, `_` and `-`)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", plan.name)


def bake_file(
    images: list[tuple[RenderedImage, Path]],
    ca_bundle: Path | None = None,
    epochs: Mapping[str, int] | None = None,
) -> BakeFile:
    """The bake definition for rendered images and their context folders; `epochs`: the
    SOURCE_DATE_EPOCH of each image by name, as `imagekit build` would stamp it, so a bake
    build is the same image and shares its build cache (build/reproducible.py)."""
    epochs = epochs or {}
    targets: dict[str, BakeTarget] = {}
    slim_targets = {
        r.plan.reference: target_name(r.plan) for r, _ in images if not r.plan.flavour.workstation
    }
    for rendered, folder in images:
        plan = rendered.plan
        target: BakeTarget = {
            "context": str(folder),
            "dockerfile": "Dockerfile",
            "tags": [
                plan.reference,
                *(f"{plan.repository}:{a}{platform_suffix(plan.platform)}" for a in plan.aliases),
            ],
            "platforms": [plan.platform],
            "args": dict(sorted(rendered.build_args.items())),
            "labels": {L.MANAGED: "true"},
        }
        if plan.name in epochs:
            epoch = str(epochs[plan.name])
            target["args"] = dict(sorted({**target["args"], SOURCE_DATE_EPOCH: epoch}.items()))
            target["labels"] = {**target["labels"], L.SOURCE_DATE_EPOCH: epoch}
        if plan.flavour.workstation and plan.slim_reference in slim_targets:
            target["contexts"] = {
                plan.slim_reference: f"target:{slim_targets[plan.slim_reference]}"
            }
        if ca_bundle is not None:
            target["secret"] = [f"id=ca,src={ca_bundle}"]
        targets[target_name(plan)] = target
    groups: dict[str, BakeGroup] = {"default": {"targets": sorted(targets)}}
    for flavour in Flavour:  # a group per flavour: `docker buildx bake slim`
        of_it = (target_name(r.plan) for r, _ in images if r.plan.flavour is flavour)
        groups[flavour.value] = {"targets": sorted(of_it)}
    return {"group": groups, "target": dict(sorted(targets.items()))}
