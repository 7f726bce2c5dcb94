"""The records `imagekit publish` writes (what happened to each image and tag), and what its gate
and attestations read of a verify record. Pure.

Beside `records.py`, whose `Record` base they share; `publish.json` of a run holds a list of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from imagekit.kernel.json import JsonValue
from imagekit.kernel.records import BuildRecord, PlanRecord, Reached, Record, VerifyRecord
from imagekit.kernel.vocabulary import AttestationState, TagKind


class PublishStatus(StrEnum):
    """What happened to one image or tag in `imagekit publish`."""

    PUBLISHED = "published"
    UNCHANGED = "unchanged"
    REFUSED = "refused"
    FAILED = "failed"
    DRY_RUN = "dry-run"

    @property
    def ok(self) -> bool:
        """Whether publish reached what it was asked (pushed, already there, or a dry run)."""
        return self in (PublishStatus.PUBLISHED, PublishStatus.UNCHANGED, PublishStatus.DRY_RUN)


class TagRecord(Record):
    """One tag of a publish: pushed, unchanged, failed or a dry run."""

    tag: str
    kind: TagKind
    status: PublishStatus
    digest: str | None = None
    attempts: int = 0
    errors: tuple[str, ...] = ()
    duration_s: float = 0.0
    error: str | None = None
    moved_from: str | None = None


class PublishRecord(Record):
    """What `imagekit publish` did with one image (an entry of `publish.json`)."""

    name: str
    status: PublishStatus
    image_id: str | None = None
    reasons: tuple[str, ...] = ()
    forced: bool = False
    tags: tuple[TagRecord, ...] = ()
    manifest_file: str | None = None
    sbom_file: str | None = None
    # With a signing key: the digest signed, and the predicate types attested to it.
    signed_digest: str | None = None
    attestations: tuple[str, ...] = ()


@dataclass(frozen=True)
class Evidence:
    """A verify record as the gate reads it: the run that wrote it, and the image's name.

    `seal_problem` is why the record's integrity seal does not hold ("" when it holds); the one
    reader of results folders (`adapters.results.verify_evidence`) always checks it, and the
    gate refuses a record with a problem. `engine` and `imagekit_version` are what the verify
    run's run.json says (for the attestation)."""

    run_id: str
    name: str
    record: VerifyRecord
    seal_problem: str = ""
    seal_digest: str = ""
    engine: Mapping[str, JsonValue] = field(default_factory=dict)
    imagekit_version: str = ""


@dataclass(frozen=True)
class AttestedLevel:
    """What the verify records attested to an image by a key say (`imagekit doctor --key`):
    the state of its signature, its digest, the level of the best passing record (None: no
    record passed), and a line for people."""

    state: AttestationState
    digest: str
    level: Reached | None
    why: str

    def to_json(self) -> dict[str, str | None]:
        """As `imagekit doctor --json` shows it."""
        return {"state": self.state, "digest": self.digest, "level": self.level, "why": self.why}


@dataclass(frozen=True)
class BuildEvidence:
    """A build record as publish's provenance reads it: the run that wrote it, the image's
    name, the record and the plan it was built from (`adapters.results.build_evidence`)."""

    run_id: str
    name: str
    record: BuildRecord
    plan: PlanRecord | None = None
