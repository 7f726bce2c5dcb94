"""Publishing the platforms of one image as one index.

`PushRun` pushes each platform of such an image under its platform tag, gated on its own
verify record; `IndexPut` then puts one index of their manifests, as the registry holds them,
under the image's versioned tag and aliases (nothing of the index when a platform is refused or
fails). Promotion joins the platforms' candidates the same way (`platform_manifest`).
"""

from __future__ import annotations

from collections.abc import Sequence

from imagekit.errors import RegistryError
from imagekit.kernel.publish_records import PublishRecord, PublishStatus, TagRecord
from imagekit.kernel.vocabulary import TagKind
from imagekit.matrix.plan import ImagePlan
from imagekit.publish.attest_run import UNSIGNED, Attestation, sign_and_attest
from imagekit.publish.decisions import (
    Pushed,
    final_tags,
    pushed_or_unchanged,
    said,
)
from imagekit.publish.gate import decide
from imagekit.publish.multiarch import PlatformManifest, index_document
from imagekit.publish.ports import ManifestDocument, PublishPorts, Registry
from imagekit.publish.requests import PublishSettings


def index_name(first: ImagePlan) -> str:
    """The index's record name. Not the amd64 image's (`<cell>-<flavour>`): the index is a
    record of its own."""
    return f"{first.cell.shared_id}-{first.flavour}-index"


class IndexPut:
    """The index of one multi-platform image whose platforms were just pushed."""

    def __init__(self, ports: PublishPorts, settings: PublishSettings) -> None:
        self.registry = ports.registry
        self.ports = ports
        self.settings = settings

    def record(self, plans: Sequence[ImagePlan], done: Sequence[PublishRecord]) -> PublishRecord:
        """One index of the platforms' manifests (`done`: their records, in the order of
        `plans`) under the image's tags; refused when a platform was not published."""
        name = index_name(plans[0])
        try:
            return self._index(plans, done, name)
        except RegistryError as exc:
            return PublishRecord(name=name, status=PublishStatus.FAILED, reasons=(said(exc),))

    def _index(
        self, plans: Sequence[ImagePlan], done: Sequence[PublishRecord], name: str
    ) -> PublishRecord:
        first = plans[0]
        repository = self.settings.repository(first)
        todo = final_tags(first)
        missing = [r.name for r in done if not r.status.ok]
        if missing:
            why = f"the index needs every platform; not published: {', '.join(missing)}"
            return PublishRecord(name=name, status=PublishStatus.REFUSED, reasons=(why,))
        if self.settings.dry_run:
            planned = tuple(
                TagRecord(tag=f"{repository}:{t}", kind=k, status=PublishStatus.DRY_RUN)
                for t, k in todo
            )
            return PublishRecord(name=name, status=PublishStatus.DRY_RUN, tags=planned)
        index = index_document(
            [self._manifest(repository, p, r) for p, r in zip(plans, done, strict=True)]
        )
        pushed = self._put_all(repository, todo, index)
        if not pushed.reached:
            return PublishRecord(
                name=name, status=pushed.status, reasons=pushed.reasons, tags=pushed.tags
            )
        attested = self._attest(plans, done, repository, index.digest)
        return PublishRecord(
            name=name,
            status=attested.status(pushed.status),
            image_id=index.digest,
            reasons=attested.reasons(()),
            tags=pushed.tags,
            signed_digest=attested.digest,
            attestations=attested.types,
        )

    def _put_all(
        self, repository: str, todo: Sequence[tuple[str, TagKind]], index: ManifestDocument
    ) -> Pushed:
        """`index` under each tag in turn, stopping at the first that fails or is refused."""
        tags: list[TagRecord] = []
        for tag, kind in todo:
            reference = f"{repository}:{tag}"
            try:
                entry = self._put_index(reference, kind, index)
            except RegistryError as exc:
                return Pushed(PublishStatus.FAILED, tuple(tags), (said(exc),))
            if entry is None:
                why = (
                    f"{reference} already exists with other content; versioned tags are never "
                    f"overwritten (this index is {index.digest})"
                )
                return Pushed(PublishStatus.REFUSED, tuple(tags), (why,))
            tags.append(entry)
        return Pushed(pushed_or_unchanged(tags), tuple(tags))

    def _attest(
        self,
        plans: Sequence[ImagePlan],
        done: Sequence[PublishRecord],
        repository: str,
        digest: str,
    ) -> Attestation:
        """Sign the index. It is what a pull of the tag resolves first: it carries each
        platform's verify record (the attestation names the platform), as a promoted index
        does."""
        signer = self.ports.signer
        if signer is None:
            return UNSIGNED
        evidence, force = self.ports.evidence, self.settings.force
        passing = [
            d.passing
            for p, r in zip(plans, done, strict=True)
            if (d := decide(p, r.image_id or "", evidence, force=force)).passing
        ]
        return sign_and_attest(signer, repository, digest, passing, None)

    def _put_index(
        self, reference: str, kind: TagKind, index: ManifestDocument
    ) -> TagRecord | None:
        """Put `index` under `reference`: unchanged where it is there already, moved where an
        alias held something else; None where a versioned tag holds other content (never
        overwritten)."""
        held = self.registry.document(reference)
        if held is not None and held.digest == index.digest:
            return TagRecord(
                tag=reference, kind=kind, status=PublishStatus.UNCHANGED, digest=held.digest
            )
        if held is not None and kind == TagKind.VERSIONED:
            return None
        digest = self.registry.put(reference, index)
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
            moved_from=held.digest if held is not None and kind == TagKind.ALIAS else None,
        )

    def _manifest(
        self, repository: str, plan: ImagePlan, record: PublishRecord
    ) -> PlatformManifest:
        """The registry's manifest of one platform's pushed image."""
        digest = next(t.digest for t in record.tags if t.digest)
        document = self.registry.document(f"{repository}@{digest}")
        if document is None:
            raise RegistryError(
                f"{repository}@{digest} ({plan.platform}) is not on the registry after its push",
                "publish again; if it persists, check the registry's storage",
            )
        return platform_manifest(self.registry, repository, plan, document)


def platform_manifest(
    registry: Registry, repository: str, plan: ImagePlan, document: ManifestDocument
) -> PlatformManifest:
    """One platform's manifest as an index entry: `document` itself, or, where the engine
    pushed an index of its own (the containerd store), its entry for this platform."""
    if document.is_index:
        arch = plan.platform.split("/")[1]
        child = next((d for d, p in document.images() if p.split("/")[:2] == ["linux", arch]), None)
        found = registry.document(f"{repository}@{child}") if child else None
        if found is None:
            raise RegistryError(
                f"{repository}@{document.digest} holds no {plan.platform} manifest",
                "push that platform's image again",
            )
        document = found
    return PlatformManifest(plan.platform, document.digest, len(document.body), document.media_type)
