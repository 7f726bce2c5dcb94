"""Adapter: the labels of an image, from the local engine, else from its registry.

`imagekit doctor --image REF` decides from labels alone, before anything is pulled: the local
engine answers first; otherwise the registry's config blob (no layer is fetched).
"""

from __future__ import annotations

from typing import Any

from imagekit.errors import EngineUnavailableError, InputError, RegistryError


def labels_of(reference: str) -> dict[str, str]:
    """The labels of `reference`; InputError when neither the engine nor a registry has it."""
    from imagekit.adapters.engine import connect, inspect_image
    from imagekit.adapters.registry import registry_auth, remote_config, split_reference

    try:
        local = inspect_image(connect(), reference)
        if local is not None:
            return dict(local.labels)
    except EngineUnavailableError:
        pass  # no engine here: a registry may still answer
    try:
        config: dict[str, Any] | None = remote_config(
            reference, registry_auth(split_reference(reference)[0])
        )
    except RegistryError as exc:
        raise InputError(
            f"image {reference} is not in the local engine and its registry did not answer: {exc}",
            "pull or build it, or check the registry name",
        ) from None
    if config is None:
        raise InputError(
            f"image {reference} is neither in the local engine nor in its registry",
            "check the name and tag (imagekit tags lists them)",
        )
    return dict((config.get("config") or {}).get("Labels") or {})
