"""The verify attestation: what a signed in-toto statement about a published digest says. Pure.

`imagekit publish` with a signing key attaches, to each published digest, an attestation of
predicate type `VERIFY_PREDICATE` whose predicate is a `VerifyPredicate` made from the verify
record that let the image through the gate, and one of the CycloneDX SBOM. `imagekit attest
verify` reads the attestations back (only those signed by the key given) and checks them
against what is required (`Requirement`). `imagekit/data/verify-predicate.schema.json` is
generated from `VerifyPredicate` (`imagekit schema --attestation`), so the schema and the code
cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Literal

import pydantic
from pydantic import Field, StringConstraints

from imagekit.kernel.json import JsonObject, JsonObjectField, JsonValue
from imagekit.kernel.publish_records import Evidence
from imagekit.kernel.records import (
    SHA256,
    Level,
    LevelState,
    Reached,
    Record,
    Status,
    Verdict,
    VerdictField,
)
from imagekit.verify.levels import rank

VERIFY_PREDICATE = "https://imagekit.dev/attestations/verify/v1"
SBOM_PREDICATE = "https://cyclonedx.org/bom"  # what cosign calls `--type cyclonedx`
SCHEMA_ID = "https://imagekit.dev/schemas/verify-predicate.v1.schema.json"


class PredicateImage(Record):
    """Which image the record is about: the reference verified, the digest, the image id."""

    reference: str
    digest: Annotated[str, StringConstraints(pattern=SHA256)]
    image_id: Annotated[str, StringConstraints(pattern=SHA256)]


class PredicateProbe(Record):
    """One probe's outcome."""

    name: Annotated[str, StringConstraints(min_length=1)]
    status: Status
    reason: str = ""


class PredicateGpu(Record):
    """The GPU the probes ran on."""

    model: str
    driver: str | None = None
    count: int | None = None
    capability: str | None = None


class VerifyPredicate(Record):
    """The predicate of an imagekit verify attestation (v1)."""

    model_config = pydantic.ConfigDict(
        frozen=True, extra="forbid", title="imagekit verify attestation predicate (v1)"
    )

    schema_version: Literal[1] = 1
    image: PredicateImage
    platform: str = ""  # linux/amd64; "" when the engine did not say
    level: Reached
    levels: dict[Level, LevelState] = Field(default_factory=dict)
    status: VerdictField
    device: str
    required_probes: tuple[str, ...] = ()
    probes: Annotated[tuple[PredicateProbe, ...], Field(min_length=1)]
    # `probe.metric` -> value: the timings and throughputs the probes measured.
    metrics: dict[str, float] = Field(default_factory=dict)
    engine: JsonObjectField = Field(default_factory=dict)  # the verify run's, as run.json says
    gpu: PredicateGpu | None = None
    verify_run: str
    record_seal: str = ""  # the digest of the verify record's integrity seal
    verified_with: str = ""  # the imagekit version that verified
    imagekit_version: str  # the imagekit version that attested


def predicate(
    evidence: Evidence, *, reference: str, digest: str, imagekit_version: str, seal: str = ""
) -> VerifyPredicate:
    """The attestation of one verify record, for the published `digest`."""
    record = evidence.record
    env = record.env_facts
    gpu = None
    if record.device.startswith("cuda") and env.get("gpu_name"):
        gpu = PredicateGpu(
            model=str(env["gpu_name"]),
            driver=env.get("driver"),
            count=env.get("gpu_count"),
            capability=env.get("gpu_capability"),
        )
    return VerifyPredicate(
        image=PredicateImage(reference=reference, digest=digest, image_id=record.image_id),
        platform=record.platform,
        level=record.level,
        levels=dict(record.levels),
        status=record.status,
        device=record.device,
        required_probes=record.required_probes,
        probes=tuple(
            PredicateProbe(name=r.probe, status=r.status, reason=r.reason) for r in record.probes
        ),
        metrics={f"{r.probe}.{k}": v for r in record.probes for k, v in sorted(r.metrics.items())},
        engine=dict(evidence.engine),
        gpu=gpu,
        verify_run=evidence.run_id,
        record_seal=seal,
        verified_with=evidence.imagekit_version,
        imagekit_version=imagekit_version,
    )


class RequiredLevel(StrEnum):
    """`--require-level`: a level an attested record can be required to reach."""

    STATIC = "static"
    CPU = "cpu"
    GPU = "gpu"


@dataclass(frozen=True)
class Requirement:
    """What an image's attestations must show: of its verify record, a level reached and probes
    that passed; of its newest audit (audit/attestation.py), an age at most `audit_days`
    that passed, and with `no_pending` no pending fix at all; with `provenance`, a build
    provenance statement that matches the image (publish/provenance.py)."""

    level: RequiredLevel | None = None
    probes: tuple[str, ...] = ()
    audit_days: int | None = None
    no_pending: bool = False
    provenance: bool = False

    @property
    def audited(self) -> bool:
        """Whether an attested audit is required."""
        return self.audit_days is not None or self.no_pending

    def describe(self) -> str:
        """`level gpu, probes ddp` for messages."""
        parts = [f"level {self.level}"] if self.level else []
        parts += [f"probe {p} passed" for p in self.probes]
        if self.audit_days is not None:
            parts.append(f"an audit at most {self.audit_days} days old that passed")
        if self.no_pending:
            parts.append("no pending security fix")
        if self.provenance:
            parts.append("provenance of this image")
        return ", ".join(parts) or "a signed verify record"


def _shortfall(record: VerifyPredicate, required: Requirement) -> list[str]:
    """Why one attested record does not meet `required` (empty: it does)."""
    why = []
    if record.status is not Verdict.PASS:
        why.append("verify recorded it as failed")
    if required.level and rank(record.level) < rank(required.level):
        why.append(f"level {record.level} < {required.level}")
    for probe in required.probes:
        found = next((p for p in record.probes if p.name == probe), None)
        if found is None:
            why.append(f"{probe} not run")
        elif found.status is not Status.PASS:
            why.append(f"{probe} {found.status}")
    return why


def judge(
    predicates: Sequence[Mapping[str, JsonValue]], required: Requirement, digest: str = ""
) -> tuple[bool, str, list[VerifyPredicate]]:
    """Whether the verified attestations of an image meet `required`: for every platform
    attested, one record (of this digest) must meet it all. Returns (ok, one line saying why
    or what held, the records read)."""
    records: list[VerifyPredicate] = []
    for item in predicates:
        try:
            records.append(VerifyPredicate.model_validate(item))
        except pydantic.ValidationError:
            continue  # not an imagekit v1 predicate: no evidence
    if digest:
        records = [r for r in records if r.image.digest == digest]
    if not records:
        return False, "no readable imagekit verify record is attested for this digest", []
    platforms: dict[str, list[VerifyPredicate]] = {}
    for record in records:
        platforms.setdefault(record.platform, []).append(record)
    problems = []
    best: dict[str, VerifyPredicate] = {}
    for platform, mine in sorted(platforms.items()):
        meeting = [r for r in mine if not _shortfall(r, required)]
        if meeting:
            best[platform] = max(meeting, key=lambda r: rank(r.level))
            continue
        top = max(mine, key=lambda r: rank(r.level))
        where = f"{platform}: " if platform else ""
        problems.append(
            where + "; ".join(_shortfall(top, required)) + f" (attested by run {top.verify_run})"
        )
    if problems:
        return (
            False,
            "attested record does not reach what is required: " + "; ".join(problems),
            records,
        )
    said = ", ".join(
        (f"{p}: " if p else "") + f"level {r.level} (run {r.verify_run})" for p, r in best.items()
    )
    return True, said, records


def predicate_schema() -> JsonObject:
    """The JSON Schema of the verify predicate, as imagekit/data/verify-predicate.schema.json
    holds it."""
    schema = VerifyPredicate.model_json_schema(mode="serialization")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "description": f"The predicate of in-toto statements of predicateType {VERIFY_PREDICATE}",
        **schema,
    }


def predicate_schema_text() -> str:
    """The schema file's exact text."""
    return json.dumps(predicate_schema(), indent=2, sort_keys=True) + "\n"
