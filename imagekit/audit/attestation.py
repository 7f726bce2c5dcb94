"""The audit attestation: a published digest's audit, signed, and what checking it finds. Pure.

With a signing key, `imagekit publish` (a matrix with a `security:` section) attaches to each
digest it pushes an attestation of predicate type `AUDIT_PREDICATE` beside the verify record's:
the audit its gate ran (`AuditPredicate`); `imagekit audit --published` attaches each later
audit of a published tag the same way, so the evidence stays as fresh as the audits.
`imagekit attest verify --require-audit-within DAYS` reads them back (only those signed by the
key) and requires the newest of this digest to be that recent and to have passed its threshold;
`--require-no-pending` requires it to list no pending fix at all.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal

import pydantic
from pydantic import StringConstraints

from imagekit.kernel.json import JsonValue
from imagekit.kernel.records import SHA256, AuditRecord, Record, Verdict

AUDIT_PREDICATE = "https://imagekit.dev/attestations/audit/v1"


class AuditPredicate(Record):
    """The predicate of an imagekit audit attestation (v1): the audit of the image a digest
    names, as it was recorded."""

    model_config = pydantic.ConfigDict(
        frozen=True, extra="forbid", title="imagekit audit attestation predicate (v1)"
    )

    schema_version: Literal[1] = 1
    reference: str  # the repository the digest was published to
    digest: Annotated[str, StringConstraints(pattern=SHA256)]
    audit: AuditRecord
    imagekit_version: str  # the imagekit version that attested


def _age_days(audit: AuditRecord, now: dt.datetime) -> float:
    return (now - dt.datetime.fromisoformat(audit.audited_at)).total_seconds() / 86400


def judge_audits(
    predicates: Sequence[Mapping[str, JsonValue]],
    digest: str,
    now: dt.datetime,
    *,
    within_days: int | None,
    no_pending: bool,
) -> tuple[bool, str]:
    """Whether the newest audit attested to `digest` is recent enough (`within_days`, if
    given), passed its threshold, and (`no_pending`) lists no pending fix; one line saying why
    not, or what held."""
    audits = []
    for item in predicates:
        try:
            audits.append(AuditPredicate.model_validate(item))
        except pydantic.ValidationError:
            continue  # not an imagekit v1 audit: no evidence
    audits = [a for a in audits if a.digest == digest]
    if not audits:
        return False, "no readable imagekit audit is attested for this digest"
    newest = max(audits, key=lambda a: a.audit.audited_at).audit
    age, pending = _age_days(newest, now), newest.pending_fixes
    said = f"audit of {newest.audited_at} ({age:.1f} days old): {len(pending)} pending fixes"
    why = []
    if within_days is not None and age > within_days:
        why.append(f"older than {within_days} days")
    if newest.status is not Verdict.PASS:
        why.append(f"it failed at {newest.threshold}")
    if no_pending and pending:
        why.append("pending: " + ", ".join(f"{f.package} -> {f.fixed}" for f in pending))
    if why:
        return False, f"the newest attested {said}; " + "; ".join(why)
    return True, said
