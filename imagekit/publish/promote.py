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

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from imagekit.errors import RegistryError
from imagekit.kernel.publish_records import Evidence, PublishRecord, PublishStatus, TagRecord
from imagekit.kernel.vocabulary import TagKind
from imagekit.matrix.plan import ImagePlan
from imagekit.publish.attest_run import UNSIGNED, Attestation, sign_and_attest
from imagekit.publish.decisions import (
    PublishMode,
    Pushed,
    candidate_tag,
    pushed_or_unchanged,
    said,
)
from imagekit.publish.gate import decide
from imagekit.publish.index import platform_manifest
from imagekit.publish.log import PublishLog
from imagekit.publish.multiarch import ImageGroup, index_document, platform_tag
from imagekit.publish.patches import own_target
from imagekit.publish.ports import ManifestDocument, PublishPorts
from imagekit.publish.requests import PublishSettings


@dataclass(frozen=True)
class ImageNames:
    """One image of a candidate, by each digest an engine may know it by."""

    platform: str  # "" for a single manifest
    config: str
    digests: tuple[str, ...]  # its manifest digest, and the index's where there is one


@dataclass(frozen=True)
class Gate:
    """What the records say of a candidate's images: whether it may be promoted, every
    reason it may not (or was forced), and the records that let each platform through."""

    allowed: bool
    image_id: str | None
    reasons: tuple[str, ...]
    passing: tuple[Evidence, ...]

    @property
    def forced(self) -> bool:
        """Whether `--force` let it through despite its reasons."""
        return bool(self.reasons) and self.allowed


class Promotion:
    """Promotes the candidates of one CI run (`settings.candidate_id`) to their final tags,
    inside the registry: it needs no engine."""

    def __init__(self, ports: PublishPorts, settings: PublishSettings, log: PublishLog) -> None:
        if settings.mode is not PublishMode.PROMOTION:
            raise ValueError(f"Promotion runs a promotion, not a {settings.mode}")
        self.registry = ports.registry
        self.ports = ports
        self.settings = settings
        self.log = log
        self.today = dt.datetime.now(dt.UTC).date()  # against each release's end_of_patch

    def publish(self, groups: Sequence[ImageGroup]) -> list[PublishRecord]:
        """Promote each image: one of a single platform from its candidate; the platforms of
        one image (`{candidate}-{arch}`, each pushed by its own CI job) joined in one index
        under the image's candidate tag first."""
        done: list[PublishRecord] = []
        for group in groups:
            if group.multi:
                first = group.plans[0]
                joined = self._join(group.plans)
                done.append(self.log.finished(first.name, joined or self.promote(first)))
            else:
                done += [self.log.finished(p.name, self.promote(p)) for p in group.plans]
        return done

    def promote(self, plan: ImagePlan) -> PublishRecord:
        """Gate the candidate of `plan` on its records, then give it the final tags."""
        repository = self.settings.repository(plan)
        source = f"{repository}:{candidate_tag(plan.tag, self.settings.candidate_id)}"
        try:
            document = self.registry.document(source)
            if document is None:
                why = f"no candidate {source} in the registry; push it with --candidate first"
                return PublishRecord(name=plan.name, status=PublishStatus.FAILED, reasons=(why,))
            images = self._images(repository, document)
        except RegistryError as exc:
            return PublishRecord(name=plan.name, status=PublishStatus.FAILED, reasons=(said(exc),))
        gate = self._gate(plan, images)
        if not gate.allowed:
            return PublishRecord(
                name=plan.name,
                status=PublishStatus.REFUSED,
                image_id=gate.image_id,
                reasons=gate.reasons,
            )
        pushed = self._tag(plan, repository, document)
        attested = self._attest(repository, document.digest, gate) if pushed.reached else UNSIGNED
        return PublishRecord(
            name=plan.name,
            status=attested.status(pushed.status),
            image_id=gate.image_id,
            reasons=attested.reasons((*gate.reasons, *pushed.reasons)),
            forced=gate.forced,
            tags=pushed.tags,
            signed_digest=attested.digest,
            attestations=attested.types,
        )

    def _join(self, plans: Sequence[ImagePlan]) -> PublishRecord | None:
        """The platforms' candidates joined in one index under the image's candidate tag;
        None when that worked, else the record of why not (a dry run stops here)."""
        first = plans[0]
        repository = self.settings.repository(first)
        candidate = candidate_tag(first.tag, self.settings.candidate_id)
        try:
            manifests = []
            for plan in plans:
                source = f"{repository}:{platform_tag(candidate, plan.platform)}"
                document = self.registry.document(source)
                if document is None:
                    why = f"no candidate {source}; its platform's job pushes it with --candidate"
                    return PublishRecord(
                        name=first.name, status=PublishStatus.FAILED, reasons=(why,)
                    )
                manifests.append(platform_manifest(self.registry, repository, plan, document))
            index = index_document(manifests)
            target = f"{repository}:{candidate}"
            held = self.registry.document(target)
            if self.settings.dry_run:
                return PublishRecord(name=first.name, status=PublishStatus.DRY_RUN)
            if held is None or held.digest != index.digest:
                self.registry.put(target, index)
        except RegistryError as exc:
            return PublishRecord(name=first.name, status=PublishStatus.FAILED, reasons=(said(exc),))
        return None

    def _attest(self, repository: str, digest: str, gate: Gate) -> Attestation:
        """Sign the promoted digest (the candidate's) and attest the records that gated it."""
        if self.ports.signer is None:
            return UNSIGNED
        return sign_and_attest(self.ports.signer, repository, digest, gate.passing, None)

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

    def _gate(self, plan: ImagePlan, images: list[ImageNames]) -> Gate:
        reasons: list[str] = []
        allowed = True
        passing: list[Evidence] = []
        for image in images:
            decision = decide(
                plan,
                image.config,
                self.ports.evidence,
                force=self.settings.force,
                also_named=image.digests,
            )
            if decision.passing is not None:
                passing.append(decision.passing)
            allowed = allowed and decision.allowed
            reasons += [f"{image.platform}: {r}" if image.platform else r for r in decision.reasons]
        image_id = images[0].config if len(images) == 1 else None
        return Gate(allowed, image_id, tuple(reasons), tuple(passing))

    def _tag(self, plan: ImagePlan, repository: str, document: ManifestDocument) -> Pushed:
        tags: list[TagRecord] = []
        try:
            target = own_target(
                self.registry,
                f"{repository}:{plan.tag}",
                plan,
                lambda held: held.digest == document.digest,
                patch=self.settings.patch,
                today=self.today,
                this=f"the candidate is {document.digest}",
            )
            if target.refused:
                return Pushed(PublishStatus.REFUSED, (), (target.refused,))
            todo = [(a, TagKind.ALIAS) for a in plan.aliases]
            if target.held is None:
                todo.insert(0, (target.tag, target.kind))
            else:
                tags.append(
                    TagRecord(
                        tag=f"{repository}:{target.tag}",
                        kind=target.kind,
                        status=PublishStatus.UNCHANGED,
                        digest=target.held.digest,
                    )
                )
            if self.settings.dry_run:  # checked and gated: nothing is put
                tags += [
                    TagRecord(tag=f"{repository}:{t}", kind=k, status=PublishStatus.DRY_RUN)
                    for t, k in todo
                ]
                return Pushed(PublishStatus.DRY_RUN, tuple(tags))
            for tag, kind in todo:
                tags.append(self._put(f"{repository}:{tag}", kind, document))
        except RegistryError as exc:
            return Pushed(PublishStatus.FAILED, tuple(tags), (said(exc),))
        return Pushed(pushed_or_unchanged(tags), tuple(tags))

    def _put(self, reference: str, kind: TagKind, document: ManifestDocument) -> TagRecord:
        before = self.registry.document(reference) if kind == TagKind.ALIAS else None
        if before is not None and before.digest == document.digest:
            return TagRecord(
                tag=reference, kind=kind, status=PublishStatus.UNCHANGED, digest=before.digest
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
            kind=kind,
            status=PublishStatus.PUBLISHED,
            digest=digest,
            moved_from=before.digest if before is not None else None,
        )
