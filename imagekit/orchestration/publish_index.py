"""Publishing the platforms of one image as one index, and promoting such candidates.

`PublishRun` hands an image of several platforms here. Directly: each platform is gated on its
own verify record and pushed under its platform tag (`PublishRun.publish_one`), then one index
of their manifests, as the registry holds them, is put under the image's versioned tag and
aliases; nothing of the index when a platform is refused or fails. As CI candidates: each
platform's job pushed `{candidate}-{arch}`; `promote` joins them in one index under the
candidate tag and promotes it as any candidate (gated per platform, its bytes copied).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from imagekit.core.gate import decide
from imagekit.core.multiarch import PlatformManifest, index_document, platform_tag
from imagekit.core.plan import ImagePlan, retarget
from imagekit.core.ports import ManifestDocument
from imagekit.core.records import PublishRecord, PublishStatus, TagKind, TagRecord
from imagekit.errors import RegistryError
from imagekit.orchestration.attest import sign_and_attest, with_attestation
from imagekit.orchestration.promote import candidate_tag, said

if TYPE_CHECKING:  # PublishRun hands its images here; only annotations name it
    from imagekit.orchestration.publish import PublishRun


class IndexPublish:
    """One multi-platform image of a `PublishRun`: its platforms, then their index."""

    def __init__(self, run: PublishRun) -> None:
        self.run = run

    def publish(self, plans: Sequence[ImagePlan]) -> list[PublishRecord]:
        """The platforms of one image: each gated on its own verify record and pushed under
        its platform tag, then one index of their manifests put under the image's tags
        (nothing of the index when a platform is refused or fails)."""
        first = plans[0]
        done = [self.run.publish_one(plan, one_platform=True) for plan in plans]
        # Not the amd64 image's name (`<cell>-<flavour>`): the index is a record of its own.
        name = f"{first.cell.shared_id}-{first.flavour}-index"
        try:
            record = self._index(plans, done, name)
        except RegistryError as exc:
            record = PublishRecord(name=name, status=PublishStatus.FAILED, reasons=(said(exc),))
        return [*done, self.run.finished(name, record)]

    def promote(self, plans: Sequence[ImagePlan]) -> PublishRecord:
        """The platforms' candidates (`{candidate}-{arch}`, each pushed by its own CI job)
        joined in one index under the image's candidate tag, then promoted as any candidate:
        each platform gated on its own records, the index's bytes copied to the final tags."""
        first = plans[0]
        repository = retarget(first.repository, self.run.settings.registry)
        candidate = candidate_tag(first.tag, self.run.settings.from_candidate or "")
        try:
            manifests = []
            for plan in plans:
                source = f"{repository}:{platform_tag(candidate, plan.platform)}"
                document = self.run.registry.document(source)
                if document is None:
                    why = f"no candidate {source}; its platform's job pushes it with --candidate"
                    record = PublishRecord(
                        name=first.name, status=PublishStatus.FAILED, reasons=(why,)
                    )
                    return self.run.finished(first.name, record)
                manifests.append(self._platform_manifest(repository, plan, document))
            index = index_document(manifests)
            target = f"{repository}:{candidate}"
            held = self.run.registry.document(target)
            if self.run.settings.dry_run:
                record = PublishRecord(name=first.name, status=PublishStatus.DRY_RUN)
                return self.run.finished(first.name, record)
            if held is None or held.digest != index.digest:
                self.run.registry.put(target, index)
        except RegistryError as exc:
            record = PublishRecord(
                name=first.name, status=PublishStatus.FAILED, reasons=(said(exc),)
            )
            return self.run.finished(first.name, record)
        return self.run.publish_one(first)

    def _index(
        self, plans: Sequence[ImagePlan], done: Sequence[PublishRecord], name: str
    ) -> PublishRecord:
        s = self.run.settings
        first = plans[0]
        repository = retarget(first.repository, s.registry)
        todo = self.run.tags_for(first)
        record = PublishRecord(name=name, status=PublishStatus.REFUSED)
        missing = [r.name for r in done if not r.status.ok]
        if missing:
            why = f"the index needs every platform; not published: {', '.join(missing)}"
            return record.model_copy(update=dict(reasons=(why,)))
        if s.dry_run:
            planned = tuple(
                TagRecord(tag=f"{repository}:{t}", kind=k, status=PublishStatus.DRY_RUN)
                for t, k in todo
            )
            return record.model_copy(update=dict(status=PublishStatus.DRY_RUN, tags=planned))
        index = index_document(
            [self._manifest(repository, p, r) for p, r in zip(plans, done, strict=True)]
        )
        tags: list[TagRecord] = []
        for tag, kind in todo:
            reference = f"{repository}:{tag}"
            try:
                entry = self._put_index(reference, kind, index)
            except RegistryError as exc:
                update = dict(status=PublishStatus.FAILED, reasons=(said(exc),), tags=tuple(tags))
                return record.model_copy(update=update)
            if entry is None:
                why = (
                    f"{reference} already exists with other content; versioned tags are never "
                    f"overwritten (this index is {index.digest})"
                )
                return record.model_copy(update=dict(reasons=(why,), tags=tuple(tags)))
            tags.append(entry)
        pushed = any(t.status is PublishStatus.PUBLISHED for t in tags)
        result = record.model_copy(
            update=dict(
                status=PublishStatus.PUBLISHED if pushed else PublishStatus.UNCHANGED,
                image_id=index.digest,
                tags=tuple(tags),
            )
        )
        if self.run.signer is None:
            return result
        # The index is what a pull of the tag resolves first: it carries each platform's
        # verify record (the attestation names the platform), as a promoted index does.
        passing = [
            d.passing
            for p, r in zip(plans, done, strict=True)
            if (d := decide(p, r.image_id or "", self.run.evidence, force=s.force)).passing
        ]
        attested = sign_and_attest(self.run.signer, repository, index.digest, passing, None)
        return with_attestation(result, attested)

    def _put_index(
        self, reference: str, kind: TagKind, index: ManifestDocument
    ) -> TagRecord | None:
        """Put `index` under `reference`: unchanged where it is there already, moved where an
        alias held something else; None where a versioned tag holds other content (never
        overwritten)."""
        held = self.run.registry.document(reference)
        if held is not None and held.digest == index.digest:
            return TagRecord(
                tag=reference, kind=kind, status=PublishStatus.UNCHANGED, digest=held.digest
            )
        if held is not None and kind == "versioned":
            return None
        digest = self.run.registry.put(reference, index)
        if digest != index.digest:
            raise RegistryError(
                f"{reference} holds {digest} after the put, not the index's {index.digest}",
                "the registry rewrote the index; publish through a registry that keeps it",
            )
        return TagRecord(
            tag=reference,
            kind=kind,
            status=PublishStatus.PUBLISHED,
            digest=digest,
            moved_from=held.digest if held is not None and kind == "alias" else None,
        )

    def _manifest(
        self, repository: str, plan: ImagePlan, record: PublishRecord
    ) -> PlatformManifest:
        """The registry's manifest of one platform's pushed image."""
        digest = next(t.digest for t in record.tags if t.digest)
        document = self.run.registry.document(f"{repository}@{digest}")
        if document is None:
            raise RegistryError(
                f"{repository}@{digest} ({plan.platform}) is not on the registry after its push",
                "publish again; if it persists, check the registry's storage",
            )
        return self._platform_manifest(repository, plan, document)

    def _platform_manifest(
        self, repository: str, plan: ImagePlan, document: ManifestDocument
    ) -> PlatformManifest:
        """One platform's manifest as an index entry: `document` itself, or, where the engine
        pushed an index of its own (the containerd store), its entry for this platform."""
        if document.is_index:
            arch = plan.platform.split("/")[1]
            child = next(
                (d for d, p in document.images() if p.split("/")[:2] == ["linux", arch]), None
            )
            found = self.run.registry.document(f"{repository}@{child}") if child else None
            if found is None:
                raise RegistryError(
                    f"{repository}@{document.digest} holds no {plan.platform} manifest",
                    "push that platform's image again",
                )
            document = found
        return PlatformManifest(
            plan.platform, document.digest, len(document.body), document.media_type
        )
