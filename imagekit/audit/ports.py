"""What an audit needs from the world: an image's own files and the security suite. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from imagekit.audit.debian import Offered
from imagekit.audit.release import ReleaseFacts, SecuritySuite
from imagekit.audit.settings import AuditSettings
from imagekit.events import EventSink
from imagekit.kernel.engine import Engine
from imagekit.kernel.json import JsonValue
from imagekit.kernel.store import RunStore


@dataclass(frozen=True)
class ImageContents:
    """What an image holds that an audit reads: its release, its dpkg database and its
    Python distributions (name -> version)."""

    os_release: str
    dpkg_status: str
    python: Mapping[str, str] = field(default_factory=dict)


class ContentsReader(Protocol):
    """Reads an image's files without running it."""

    def contents(self, image_id: str) -> ImageContents:
        """`/etc/os-release`, `/var/lib/dpkg/status` and the Python distributions of an image."""
        ...


@dataclass(frozen=True)
class IndexState:
    """A security suite as read: where, its signed facts, the index's digest, what it offers."""

    suite: SecuritySuite
    facts: ReleaseFacts
    packages_sha256: str
    offered: Mapping[str, Offered]


class SecurityIndexSource(Protocol):
    """The distribution's security suites, fetched and checked."""

    def state(self, suite: SecuritySuite) -> IndexState:
        """The suite's signed facts and what its Packages index offers."""
        ...


class Attester(Protocol):
    """Attaches signed attestations to published digests (cosign with a key)."""

    def attest(
        self, reference: str, predicate_type: str, predicate: Mapping[str, JsonValue]
    ) -> str:
        """Attach a signed in-toto attestation of `predicate` to `repository@digest`; "" when
        it worked, else the reason."""
        ...


@dataclass
class AuditPorts:
    """What the audit reaches the world through."""

    engine: Engine
    contents: ContentsReader
    indexes: SecurityIndexSource
    store: RunStore
    events: EventSink
    attester: Attester | None = None  # None: the audits of published tags are not attested


@dataclass(frozen=True)
class AuditWith:
    """An audit made ready for another use case to run (publish's gate): its ports and what
    it is asked."""

    ports: AuditPorts
    settings: AuditSettings
