"""Adapter: the labels of an image, from the local engine, else from its registry.

`imagekit doctor --image REF` decides from labels alone, before anything is pulled: the local
engine answers first; otherwise the registry's config blob (no layer is fetched). REF is read
as Docker reads it: `ubuntu:22.04` is docker.io/library/ubuntu:22.04, asked of Docker Hub.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from typing import TYPE_CHECKING

from imagekit.errors import EngineUnavailableError, InputError, RegistryError
from imagekit.kernel.json import JsonObject, as_object
from imagekit.kernel.reference import parse
from imagekit.kernel.runtime import docker_arch

if TYPE_CHECKING:
    from imagekit.matrix.plan import ImagePlan


def labels_of(reference: str) -> dict[str, str]:
    """The labels of `reference` (of its image for this host's architecture, when it names
    an index); InputError when the reference is invalid or nobody has the image, engine
    trouble when no engine answered and the registry could not give them either."""
    from imagekit.adapters.engine import open_engine
    from imagekit.adapters.registry import registry_auth
    from imagekit.adapters.registry_api import remote_config

    ref = parse(reference)
    down: EngineUnavailableError | None = None
    try:
        local = open_engine().local_image(reference)
        if local is not None:
            return dict(local.labels)
    except EngineUnavailableError as exc:
        down = exc  # no engine here: a registry may still answer
    here = f"linux/{docker_arch(platform.machine())}"
    try:
        config: JsonObject | None = remote_config(reference, registry_auth(ref.registry), here)
    except RegistryError as exc:
        said = f"its registry {ref.registry} did not answer: {exc}"
        missing = InputError(
            f"image {reference} is not in the local engine, and {said}",
            "pull or build it, or check the registry name",
        )
        raise _unless_engine_down(reference, down, said, missing) from None
    if config is None:
        missing = InputError(
            f"image {reference} ({ref}) is neither in the local engine nor in its registry",
            "check the name and tag (imagekit tags lists them)",
        )
        said = f"its registry does not have it ({ref})"
        raise _unless_engine_down(reference, down, said, missing)
    labels = as_object(as_object(config.get("config")).get("Labels"))
    return {name: str(value) for name, value in labels.items()}


def _unless_engine_down(
    reference: str, down: EngineUnavailableError | None, registry_said: str, missing: InputError
) -> InputError | EngineUnavailableError:
    """Why `reference` has no labels here: engine trouble (exit 3) when no engine answered,
    since the image may well be in it; else `missing`, bad input (exit 2): it is in neither
    place."""
    if down is None:
        return missing
    return EngineUnavailableError(
        f"could not look for image {reference} in the local engine ({down.message}), and "
        f"{registry_said}",
        down.hint or "start the engine (make engine), or check DOCKER_HOST",
    )


def doctor_targets(
    plans: Sequence[ImagePlan], references: Sequence[str]
) -> list[tuple[str, dict[str, str]]]:
    """Each image `imagekit doctor` checks, with its labels: the plans' as they would be built,
    then those named by reference (from the local engine, else the registry)."""
    from imagekit.build.render import RenderOptions, image_labels

    built = [(p.reference, image_labels(p, RenderOptions())) for p in plans]
    return built + [(reference, labels_of(reference)) for reference in references]
