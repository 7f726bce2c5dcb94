"""Checking an image's signature and attested verify records against a key: `imagekit attest
verify` (does the image reach what is required?) and `imagekit doctor --key` (which level did
it reach?). Through the `AttestationReader` port (cosign in production); `core.attest.judge`
decides."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypedDict

from imagekit.audit.attestation import AUDIT_PREDICATE, judge_audits
from imagekit.errors import NotAttestedError
from imagekit.kernel.json import JsonObject
from imagekit.kernel.publish_records import AttestedLevel
from imagekit.kernel.records import Verdict
from imagekit.kernel.vocabulary import AttestationState
from imagekit.publish.attest import VERIFY_PREDICATE, Requirement, VerifyPredicate, judge
from imagekit.publish.ports import AttestationReader, Attested
from imagekit.publish.provenance import PROVENANCE_PREDICATE, judge_provenance
from imagekit.verify.levels import rank


class AttestCheckJson(TypedDict):
    """`imagekit attest verify --json`: one image."""

    image: str
    digest: str | None
    state: AttestationState
    ok: bool
    required: str
    reason: str
    records: list[JsonObject]  # the attested predicates read


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


def check_attestations(
    reader: AttestationReader,
    image: str,
    required: Requirement,
    now: dt.datetime,
    labels: Callable[[], Mapping[str, str]] = dict,
) -> AttestCheck:
    """Whether `image` is signed by the reader's key, an attested verify record of its digest
    reaches `required`, and, where `required` asks for them, its newest attested audit (as of
    `now`) and a provenance statement that matches the image's `labels` (asked only then)."""
    found = reader.attested(image, VERIFY_PREDICATE)
    if found.state != AttestationState.OK:
        return AttestCheck(image, found, required, False, found.reason)
    ok, why, records = judge(found.predicates, required, found.digest)
    if ok and required.audited:
        audits = reader.attested(image, AUDIT_PREDICATE)
        if audits.state != AttestationState.OK:
            return AttestCheck(image, audits, required, False, f"audit: {audits.reason}")
        ok, said = judge_audits(
            audits.predicates,
            found.digest or "",
            now,
            within_days=required.audit_days,
            no_pending=required.no_pending,
        )
        why = f"{why}; {said}" if ok else said
    if ok and required.provenance:
        statements = reader.attested(image, PROVENANCE_PREDICATE)
        if statements.state != AttestationState.OK:
            return AttestCheck(
                image, statements, required, False, f"provenance: {statements.reason}"
            )
        ok, said = judge_provenance(statements.predicates, labels())
        why = f"{why}; {said}" if ok else said
    return AttestCheck(image, found, required, ok, why, tuple(records))


def attested_level(reader: AttestationReader, reference: str) -> AttestedLevel:
    """The level the verify records attested to `reference` reach, by the reader's key."""
    found = reader.attested(reference, VERIFY_PREDICATE)
    if found.state != AttestationState.OK:
        return AttestedLevel(found.state, found.digest, None, found.reason)
    ok, why, records = judge(found.predicates, Requirement(), found.digest)
    best = max((r.level for r in records if r.status is Verdict.PASS), key=rank, default=None)
    state = AttestationState.OK if ok else AttestationState.NO_ATTESTATION
    return AttestedLevel(state, found.digest, best, why)
