"""Signing a published digest and attaching its evidence: the verify records, the SBOM, the
build's provenance and the audit.

Used by `LocalPush` (a local image pushed under its tags or as a candidate), `IndexPut` (the
index of an image's platforms) and `Promotion` (a candidate promoted inside the registry).
Always the digest, never a tag: a tag can move, the digest is the content. Through the `Signer`
port (cosign in production).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from imagekit import __version__
from imagekit.kernel.json import JsonValue
from imagekit.kernel.publish_records import Evidence, PublishStatus
from imagekit.publish.attest import SBOM_PREDICATE, VERIFY_PREDICATE, predicate
from imagekit.publish.ports import Signer


@dataclass(frozen=True)
class Attestation:
    """What signing one digest did: the digest signed, the predicate types attached, and why
    it stopped ("" when everything was attached). `UNSIGNED` where there was no key."""

    digest: str | None
    types: tuple[str, ...]
    error: str = ""

    def status(self, status: PublishStatus) -> PublishStatus:
        """The image's status once signed: a failure to sign fails it (its tags are pushed,
        but it does not carry its proof)."""
        return PublishStatus.FAILED if self.error else status

    def reasons(self, reasons: tuple[str, ...]) -> tuple[str, ...]:
        """The image's reasons once signed: with the failure to sign, if it failed."""
        return (*reasons, f"pushed, but {self.error}") if self.error else reasons


UNSIGNED = Attestation(None, ())


def sign_and_attest(
    signer: Signer,
    repository: str,
    digest: str,
    records: Sequence[Evidence],
    sbom: Mapping[str, JsonValue] | None,
    more: Sequence[tuple[str, Mapping[str, JsonValue]]] = (),
) -> Attestation:
    """Sign `repository@digest`, then attest each verify record in `records`, the SBOM, and
    each (predicate type, predicate) of `more`: the build's provenance, the gate's audit."""
    reference = f"{repository}@{digest}"
    error = signer.sign(reference)
    if error:
        return Attestation(None, (), f"signing {reference} failed: {error}")
    done: list[str] = []
    for evidence in records:
        body = predicate(
            evidence,
            reference=repository,
            digest=digest,
            imagekit_version=__version__,
            seal=evidence.seal_digest,
        ).to_json()
        error = signer.attest(reference, VERIFY_PREDICATE, body)
        if error:
            return Attestation(digest, tuple(done), f"attesting the verify record failed: {error}")
        done.append(VERIFY_PREDICATE)
    if sbom is not None:
        error = signer.attest(reference, SBOM_PREDICATE, sbom)
        if error:
            return Attestation(digest, tuple(done), f"attesting the SBOM failed: {error}")
        done.append(SBOM_PREDICATE)
    for kind, other in more:
        error = signer.attest(reference, kind, other)
        if error:
            return Attestation(digest, tuple(done), f"attesting {kind} failed: {error}")
        done.append(kind)
    return Attestation(digest, tuple(done))
