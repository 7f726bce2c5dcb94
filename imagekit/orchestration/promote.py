"""Promotion: a verified candidate becomes the final tags inside the registry.

`imagekit publish --from-candidate ID` reads the candidate's manifest (or index) and puts the
very same bytes under the versioned tag and the aliases through the registry API: no pull, no
push of layers, no engine, and the published digest is the candidate's, byte for byte. The gate
holds as for any publish: the image the candidate holds (its config digest, the image id) must
have a passing verify record, for every platform of an index.

With a signer, the promoted digest (the candidate's) is signed and the verify record that let
each platform through is attested to it. Attestations live beside the digest in the same
repository, so whatever was attached to the candidate when it was pushed (`--candidate` with a
key: its first verify record and its SBOM) is the promoted image's too; promotion adds the
records of the verifications that gated it (a GPU runner's, say). No SBOM is made here: a
promotion has no engine to look inside the image, and the candidate's SBOM already travels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from imagekit.core.gate import decide
from imagekit.core.plan import ImagePlan
from imagekit.core.ports import ManifestDocument, Registry, Signer
from imagekit.core.records import Evidence, PublishRecord, PublishStatus, TagRecord
from imagekit.errors import ImagekitError, RegistryError
from imagekit.orchestration.attest import sign_and_attest, with_attestation


def candidate_tag(tag: str, candidate: str) -> str:
    """The pre-release tag CI pushes before verification on every runner has passed."""
    return f"{tag}-candidate-{candidate}"


def said(exc: ImagekitError) -> str:
    """What the registry's (or the engine's) failure means, with what to do, on one line."""
    return f"{exc.message}; {exc.hint}" if exc.hint else exc.message


@dataclass(frozen=True)
class ImageNames:
    """One image of a candidate, by each digest an engine may know it by."""

    platform: str  # "" for a single manifest
    config: str
    digests: tuple[str, ...]  # its manifest digest, and the index's where there is one


class Promotion:
    """Promotes the candidates of one CI run (`candidate`) to their final tags."""

    def __init__(
        self,
        registry: Registry,
        evidence: Sequence[Evidence],
        candidate: str,
        force: bool,
        *,
        signer: Signer | None = None,
    ) -> None:
        self.registry = registry
        self.evidence = list(evidence)
        self.candidate = candidate
        self.force = force
        self.signer = signer
        self.passing: list[Evidence] = []  # the records that let the last candidate through

    def promote(self, plan: ImagePlan, repository: str) -> PublishRecord:
        """Gate the candidate of `plan` on its records, then give it the final tags."""
        source = f"{repository}:{candidate_tag(plan.tag, self.candidate)}"
        fail = PublishRecord(name=plan.name, status=PublishStatus.FAILED)
        try:
            document = self.registry.document(source)
            if document is None:
                why = f"no candidate {source} in the registry; push it with --candidate first"
                return fail.model_copy(update={"reasons": (why,)})
            images = self._images(repository, document)
        except RegistryError as exc:
            return fail.model_copy(update={"reasons": (said(exc),)})
        record = self._gate(plan, images)
        if record.status is PublishStatus.REFUSED:
            return record
        done = self._tag(plan, repository, document, record)
        if self.signer is None or not done.status.ok:
            return done
        attested = sign_and_attest(self.signer, repository, document.digest, self.passing, None)
        return with_attestation(done, attested)

    def _images(self, repository: str, document: ManifestDocument) -> list[ImageNames]:
        """Each image the candidate holds: its platform, config digest (the id a classic store
        or Podman gives it) and the manifest and index digests (the containerd store's id)."""
        if not document.is_index:
            return [ImageNames("", document.config, (document.digest,))]
        found = []
        for digest, platform in document.images():
            child = self.registry.document(f"{repository}@{digest}")
            if child is None:
                raise RegistryError(f"the index names {digest} ({platform}), which is absent")
            found.append(ImageNames(platform, child.config, (child.digest, document.digest)))
        return found

    def _gate(self, plan: ImagePlan, images: list[ImageNames]) -> PublishRecord:
        reasons: list[str] = []
        allowed = True
        self.passing = []
        for image in images:
            decision = decide(
                plan, image.config, self.evidence, force=self.force, also_named=image.digests
            )
            if decision.passing is not None:
                self.passing.append(decision.passing)
            allowed = allowed and decision.allowed
            reasons += [f"{image.platform}: {r}" if image.platform else r for r in decision.reasons]
        return PublishRecord(
            name=plan.name,
            status=PublishStatus.PUBLISHED if allowed else PublishStatus.REFUSED,
            image_id=images[0].config if len(images) == 1 else None,
            reasons=tuple(reasons),
            forced=bool(reasons) and allowed,
        )

    def _tag(
        self, plan: ImagePlan, repository: str, document: ManifestDocument, record: PublishRecord
    ) -> PublishRecord:
        tags: list[TagRecord] = []
        versioned = f"{repository}:{plan.tag}"
        try:
            held = self.registry.document(versioned)
            if held is not None and held.digest != document.digest:
                why = (
                    f"{versioned} already exists with other content (registry digest "
                    f"{held.digest}; the candidate is {document.digest}); versioned tags are "
                    "never overwritten"
                )
                return record.model_copy(
                    update={"status": PublishStatus.REFUSED, "reasons": (*record.reasons, why)}
                )
            todo = [(a, "alias") for a in plan.aliases]
            if held is None:
                todo.insert(0, (plan.tag, "versioned"))
            else:
                tags.append(
                    TagRecord(
                        tag=versioned,
                        kind="versioned",
                        status=PublishStatus.UNCHANGED,
                        digest=held.digest,
                    )
                )
            for tag, kind in todo:
                tags.append(self._put(f"{repository}:{tag}", kind, document))
        except RegistryError as exc:
            return record.model_copy(
                update={
                    "status": PublishStatus.FAILED,
                    "tags": tuple(tags),
                    "reasons": (*record.reasons, said(exc)),
                }
            )
        pushed = any(t.status is PublishStatus.PUBLISHED for t in tags)
        return record.model_copy(
            update={
                "status": PublishStatus.PUBLISHED if pushed else PublishStatus.UNCHANGED,
                "tags": tuple(tags),
            }
        )

    def _put(self, reference: str, kind: str, document: ManifestDocument) -> TagRecord:
        before = self.registry.document(reference) if kind == "alias" else None
        if before is not None and before.digest == document.digest:
            return TagRecord(
                tag=reference, kind="alias", status=PublishStatus.UNCHANGED, digest=before.digest
            )
        digest = self.registry.put(reference, document)
        if digest != document.digest:
            raise RegistryError(
                f"{reference} holds {digest} after promotion, not the candidate's "
                f"{document.digest}",
                "the registry rewrote the manifest; promote through a registry that keeps it",
            )
        return TagRecord(
            tag=reference,
            kind="alias" if kind == "alias" else "versioned",
            status=PublishStatus.PUBLISHED,
            digest=digest,
            moved_from=before.digest if before is not None else None,
        )
