"""What publish needs from the world: a registry, an SBOM maker, a signer, and the bundle of
them a publish works through (PublishPorts). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from imagekit.audit.ports import AuditWith
from imagekit.events import EventSink
from imagekit.kernel.json import JsonObject, JsonValue
from imagekit.kernel.publish_records import BuildEvidence, Evidence
from imagekit.kernel.store import RunStore
from imagekit.kernel.vocabulary import AttestationState, PushFailure


@dataclass(frozen=True)
class RemoteManifest:
    """What a registry holds under a tag: the manifest (or index) digest and the config
    digest ("" for an index)."""

    digest: str
    config: str

    def holds(self, image_id: str) -> bool:
        """Whether this is the local image `image_id`, compared like with like: an engine
        whose ids are config digests (the classic store, Podman) matches the config; one whose
        ids are manifest or index digests (the containerd store, which pushes its manifest
        unchanged) matches the tag's digest. Each is a hash of the image's whole content."""
        return bool(image_id) and image_id in (self.digest, self.config)


@dataclass(frozen=True)
class ManifestDocument:
    """A manifest or an index as the registry holds it: its exact bytes and what they say.

    Promotion puts these same bytes under another tag, so the digest stays the same.
    """

    media_type: str
    body: bytes
    digest: str
    config: str = ""  # a manifest's config digest (the image id); "" for an index
    children: tuple[tuple[str, str], ...] = ()  # an index's (digest, platform) entries

    @property
    def is_index(self) -> bool:
        """Whether this is an index (a manifest list) rather than one image's manifest."""
        return bool(self.children) or "index" in self.media_type or "list" in self.media_type

    def images(self) -> tuple[tuple[str, str], ...]:
        """The image manifests of an index, attestation manifests (unknown/unknown) left out."""
        return tuple((d, p) for d, p in self.children if p != "unknown/unknown")


@dataclass(frozen=True)
class PushOutcome:
    """How pushing one tag ended."""

    ok: bool
    attempts: int
    error: str = ""
    kind: PushFailure | None = None  # a failure's
    errors: tuple[str, ...] = ()


class Registry(Protocol):
    """The registry images are published to."""

    def manifest(self, reference: str) -> RemoteManifest | None:
        """What `reference` holds; None when the tag is absent; RegistryError when the
        registry cannot be asked."""
        ...

    def push(self, reference: str) -> PushOutcome:
        """Push the local `reference`, retrying what is transient."""
        ...

    def document(self, reference: str) -> ManifestDocument | None:
        """The manifest or index `reference` (a tag, or `repository@digest`) names, byte for
        byte; None when absent."""
        ...

    def put(self, reference: str, document: ManifestDocument) -> str:
        """Put `document` under the tag `reference` names, unchanged; the digest it has there."""
        ...

    def list_tags(self, repository: str) -> tuple[str, ...]:
        """Every tag of `repository` (`registry/name`); () when it has none."""
        ...


@dataclass(frozen=True)
class Package:
    """One installed package of an image: a Python distribution or an OS (dpkg) package."""

    name: str
    version: str
    arch: str = ""  # dpkg's architecture (amd64, all); "" for Python
    properties: tuple[tuple[str, str], ...] = ()  # e.g. the CUDA stack a torch wheel carries


@dataclass(frozen=True)
class Inventory:
    """What an image holds, for its SBOM: the image, its OS, its OS and Python packages."""

    reference: str
    digest: str
    image_id: str
    distro: str = ""  # `debian-12` (os-release ID-VERSION_ID)
    os_packages: tuple[Package, ...] = ()
    python_packages: tuple[Package, ...] = ()


class SbomMaker(Protocol):
    """Writes software bills of materials."""

    def image_sbom(self, inventory: Inventory) -> JsonObject:
        """One CycloneDX document for the whole image: OS and Python packages together,
        checked against the CycloneDX schema."""
        ...


class Signer(Protocol):
    """Signs published digests and attaches attestations to them (cosign with a key file)."""

    def sign(self, reference: str) -> str:
        """Sign `repository@digest`; "" when it worked, else the reason."""
        ...

    def attest(
        self, reference: str, predicate_type: str, predicate: Mapping[str, JsonValue]
    ) -> str:
        """Attach a signed in-toto attestation of `predicate` to `repository@digest`; "" when
        it worked, else the reason."""
        ...


@dataclass(frozen=True)
class Attested:
    """What checking an image's signature and attestations of one type against a public key
    found: with `ok`, `predicates` holds the attested predicates of the type, every one verified
    against the key; with `error`, `reason` says how the registry or the tool failed."""

    state: AttestationState
    reason: str = ""
    digest: str = ""
    predicates: tuple[JsonObject, ...] = ()


class AttestationReader(Protocol):
    """Checks an image's signature and reads its attestations, verified against a key."""

    def attested(self, reference: str, predicate_type: str) -> Attested:
        """The signature of `reference` (tag or digest) and its attestations of one type."""
        ...


@dataclass(frozen=True)
class PublishPorts:
    """The world a publish works in, whatever its mode (an engine is the push modes' own)."""

    registry: Registry
    store: RunStore
    evidence: Sequence[Evidence]  # verify records of any images, newest first: the gate's
    events: EventSink
    sbom: SbomMaker
    signer: Signer | None = None  # None: publish unsigned
    audit: AuditWith | None = None  # the gate's audit: the matrix has a `security:` section
    builds: Sequence[BuildEvidence] = ()  # build records of any images: the provenance's
