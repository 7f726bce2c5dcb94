"""Patch tags: how a rebuild of a published image is published without touching its tag. Pure.

A versioned tag (`2.15.0-cu132-py3.12-slim`) is immutable. When the image it names is rebuilt
(its base took the distribution's security fixes, say), `publish --patch` publishes the
rebuild as `{versioned}-p1`, then `-p2`, each as immutable as the versioned tag, and moves the
aliases (`2.15-slim`, `latest-slim`) to it. So a pinned tag never changes under a user, and a
floating one always names the newest patch. The newest published image of a versioned tag is
its highest patch tag, else the versioned tag itself (`newest_tag`).

A release's `end_of_patch` date (matrix.yaml) ends this: after it no patch is published, and
the images keep what they had.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from imagekit.kernel.vocabulary import TagKind
from imagekit.matrix.plan import ImagePlan
from imagekit.publish.ports import Registry, RemoteManifest


def patch_tag(tag: str, number: int) -> str:
    """The tag of the `number`th patch of the image published as `tag`."""
    return f"{tag}-p{number}"


def patch_numbers(tag: str, listed: Iterable[str]) -> list[int]:
    """The numbers of the patch tags of `tag` among a repository's tags, lowest first."""
    pattern = re.compile(re.escape(tag) + r"-p([1-9][0-9]*)")
    return sorted(int(m.group(1)) for t in listed if (m := pattern.fullmatch(t)))


def newest_tag(tag: str, listed: Iterable[str]) -> str | None:
    """The tag of the newest published image of `tag`: its highest patch, else `tag` itself;
    None when neither is among the repository's tags."""
    listed = list(listed)
    numbers = patch_numbers(tag, listed)
    if numbers:
        return patch_tag(tag, numbers[-1])
    return tag if tag in listed else None


def past_end_of_patch(plan: ImagePlan, today: dt.date) -> bool:
    """Whether `today` is after the last day the image's release is patched."""
    end = plan.cell.end_of_patch
    return end is not None and today > dt.date.fromisoformat(end)


@dataclass(frozen=True)
class Target:
    """Where an image's own tag goes: the tag and its kind, what the registry holds there now
    (the image itself: nothing to push), or why it may not be published."""

    tag: str
    kind: TagKind
    held: RemoteManifest | None = None
    refused: str = ""


def own_target(
    registry: Registry,
    reference: str,
    plan: ImagePlan,
    holds: Callable[[RemoteManifest], bool],
    *,
    patch: bool,
    today: dt.date,
    this: str,
) -> Target:
    """The tag an image is published under, given the first of its tags (`repository:tag`):
    that tag where it is absent or holds the image; with `patch` (its versioned tag only),
    where the tag holds another image, the newest patch tag when that holds it, else the next
    patch tag. `holds` says whether a manifest is this image, `this` what it is in a refusal
    ("this image is sha256:..."). RegistryError when the registry cannot be asked."""
    repository, _, tag = reference.rpartition(":")
    held = registry.manifest(reference)
    if held is None or holds(held):
        return Target(tag, TagKind.VERSIONED, held)
    config = f", image {held.config}" if held.config else ""
    if not patch:
        how = ": publish a rebuild with --patch" if tag == plan.tag else ""
        why = (
            f"{reference} already exists with other content (registry digest {held.digest}"
            f"{config}; {this}); versioned tags are never "
            f"overwritten{how}"
        )
        return Target(tag, TagKind.VERSIONED, held, why)
    if past_end_of_patch(plan, today):
        why = (
            f"{reference}: its release's end_of_patch ({plan.cell.end_of_patch}) has passed; "
            "its images are no longer patched"
        )
        return Target(tag, TagKind.PATCH, held, why)
    numbers = patch_numbers(tag, registry.list_tags(repository))
    if numbers:
        newest = patch_tag(tag, numbers[-1])
        last = registry.manifest(f"{repository}:{newest}")
        if last is not None and holds(last):
            return Target(newest, TagKind.PATCH, last)
    return Target(patch_tag(tag, (numbers[-1] if numbers else 0) + 1), TagKind.PATCH)
