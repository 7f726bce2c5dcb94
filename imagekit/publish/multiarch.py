"""One tag, several platforms: grouping an image's platform plans and the index that names them.

Pure. A multi-platform image is published as one manifest per platform, each under its own
platform tag (`{tag}-{arch}`: a user can still pin one platform), and one index under the
image's tags whose entries name those manifests by digest. The index is written canonically
(sorted keys, no spaces, platforms in a fixed order), so publishing the same manifests again
makes the same bytes and digest: the versioned tag's immutability check holds for indexes too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NotRequired, TypedDict

from imagekit.errors import InputError
from imagekit.matrix.plan import ImagePlan, platform_arch
from imagekit.publish.ports import ManifestDocument

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
# The OCI platform variant registries and engines expect for each architecture.
_VARIANTS = {"arm64": "v8"}


def platform_tag(tag: str, platform: str) -> str:
    """The tag one platform's manifest is pushed under: `{tag}-{arch}` (`...-slim-arm64`)."""
    return f"{tag}-{platform_arch(platform)}"


@dataclass(frozen=True)
class ImageGroup:
    """The selected platforms of one image (a repository and versioned tag), and how many
    platforms the image has in the matrix."""

    plans: tuple[ImagePlan, ...]
    platforms: int

    @property
    def multi(self) -> bool:
        """Whether the image's tag names an index of several platforms."""
        return self.platforms > 1


def image_groups(
    selected: Sequence[ImagePlan], every: Sequence[ImagePlan], *, partial: bool = False
) -> list[ImageGroup]:
    """The selected plans by image (repository and versioned tag), in the order first
    selected. Unless `partial` (CI candidates: each platform's job pushes its own), an
    `InputError` when a multi-platform image is selected without all its platforms: its tag
    names an index of them all, so one platform alone cannot be published under it."""
    by_image: dict[tuple[str, str], list[ImagePlan]] = {}
    for plan in every:
        by_image.setdefault((plan.repository, plan.tag), []).append(plan)
    groups: dict[tuple[str, str], list[ImagePlan]] = {}
    for plan in selected:
        groups.setdefault((plan.repository, plan.tag), []).append(plan)
    out = []
    for key, chosen in groups.items():
        platforms = by_image.get(key, chosen)
        if len(chosen) != len(platforms) and not partial:
            missing = [p.platform for p in platforms if p not in chosen]
            raise InputError(
                f"{key[1]} is one index of {', '.join(p.platform for p in platforms)}: "
                f"publishing it needs {', '.join(missing)} too",
                "select every platform of the image (drop --platform), or push each platform "
                "as a CI candidate (--candidate) and promote them together (--from-candidate)",
            )
        out.append(ImageGroup(tuple(chosen), len(platforms)))
    return out


@dataclass(frozen=True)
class PlatformManifest:
    """One platform's manifest as the registry holds it."""

    platform: str  # linux/arm64
    digest: str
    size: int
    media_type: str


class PlatformJson(TypedDict):
    """The platform of an index's entry, as the OCI image index spells it."""

    os: str
    architecture: str
    variant: NotRequired[str]


class IndexEntry(TypedDict):
    """One manifest an index names."""

    mediaType: str
    digest: str
    size: int
    platform: PlatformJson


def index_document(manifests: Sequence[PlatformManifest]) -> ManifestDocument:
    """The index of `manifests`: a Docker manifest list when every entry is a Docker v2
    manifest (what the classic store pushes), else an OCI index."""
    entries: list[IndexEntry] = []
    children: list[tuple[str, str]] = []
    for m in sorted(manifests, key=lambda m: m.platform):
        os_name, arch = m.platform.split("/")[:2]
        platform: PlatformJson = {"os": os_name, "architecture": arch}
        variant = _VARIANTS.get(arch)
        if variant:
            platform["variant"] = variant
        entries.append(
            {"mediaType": m.media_type, "digest": m.digest, "size": m.size, "platform": platform}
        )
        children.append((m.digest, "/".join([os_name, arch, *([variant] if variant else [])])))
    docker = all(m.media_type == DOCKER_MANIFEST for m in manifests)
    media_type = DOCKER_LIST if docker else OCI_INDEX
    body = json.dumps(
        {"schemaVersion": 2, "mediaType": media_type, "manifests": entries},
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    return ManifestDocument(media_type, body, digest, "", tuple(children))
