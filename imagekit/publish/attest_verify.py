"""Checking an image's signature and attested verify records against a key: `imagekit attest
verify` (does the image reach what is required?) and `imagekit doctor --key` (which level did
it reach?). Through the `AttestationReader` port (cosign in production); `core.attest.judge`
decides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from imagekit.errors import NotAttestedError
from imagekit.publish.attest import VERIFY_PREDICATE, Requirement, VerifyPredicate, judge
from imagekit.publish.ports import AttestationReader, Attested
from imagekit.verify.levels import rank


class AttestCheckJson(TypedDict):
    """`imagekit attest verify --json`: one image."""

    image: str
    digest: str | None
    state: str
    ok: bool
    required: str
    reason: str
    records: list[dict[str, object]]


@dataclass(frozen=True)
class AttestCheck:
    """What checking one image against a requirement found: what the reader found, whether
    the attested records meet the requirement, and one line saying why (or what held)."""

    image: str
    found: Attested
    required: Requirement
    ok: bool
    reason: str
    records: tuple[VerifyPredicate, ...] = ()

    def failure(self) -> NotAttestedError | None:
        """The error (exit 8, one line) when the image falls short; None when it passes."""
        return None if self.ok else NotAttestedError(f"{self.image}: {self.reason}")

    def summary(self, key: str) -> str:
        """The line for people when the image passes."""
        return (
            f"{self.image}@{self.found.digest}: signed by {key}; attested {self.reason}; "
            f"requires {self.required.describe()}: ok"
        )

    def to_json(self) -> AttestCheckJson:
        """As `imagekit attest verify --json` prints it."""
        return {
            "image": self.image,
            "digest": self.found.digest,
            "state": self.found.state,
            "ok": self.ok,
            "required": self.required.describe(),
            "reason": self.reason,
            "records": [r.to_json() for r in self.records],
        }


def check_attestations(reader: AttestationReader, image: str, required: Requirement) -> AttestCheck:
    """Whether `image` is signed by the reader's key and an attested verify record of its
    digest reaches `required`."""
    found = reader.attested(image, VERIFY_PREDICATE)
    if found.state != "ok":
        return AttestCheck(image, found, required, False, found.reason)
    ok, why, records = judge(found.predicates, required, found.digest)
    return AttestCheck(image, found, required, ok, why, tuple(records))


@dataclass(frozen=True)
class AttestedLevel:
    """What the attestations signed by a key say about an image: state, digest, the level
    reached (the best passing attested record; None for none), and a line for people."""

    state: str
    digest: str
    level: str | None
    why: str

    def to_json(self) -> dict[str, str | None]:
        """As `imagekit doctor --json` shows it."""
        return {"state": self.state, "digest": self.digest, "level": self.level, "why": self.why}


def attested_level(reader: AttestationReader, reference: str) -> AttestedLevel:
    """The level the verify records attested to `reference` reach, by the reader's key."""
    found = reader.attested(reference, VERIFY_PREDICATE)
    if found.state != "ok":
        return AttestedLevel(found.state, found.digest, None, found.reason)
    ok, why, records = judge(found.predicates, Requirement(), found.digest)
    levels = [str(r.level) for r in records if r.status == "pass"]
    best = max(levels, key=rank) if levels else None
    return AttestedLevel("ok" if ok else "no attestation", found.digest, best, why)
