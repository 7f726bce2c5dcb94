"""Orchestration of `imagekit publish`: gate, immutable versioned tags, moving aliases, records.

For each image: the local image must exist and pass the gate (verify results for
this exact image id, tags equal to the probed facts); its versioned tag must not
exist on the registry with other content (same content: a no-op); then every tag
is pushed, its digest read back from the registry, a package manifest and a
CycloneDX SBOM of the whole image written, and everything recorded in
results/<run-id>/publish.json. With a signer (a signing key), the digest is signed and the
verify record that passed the gate and the SBOM are attached to it as attestations.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from imagekit.core.gate import GateDecision, decide
from imagekit.core.inventory import DPKG_FORMAT, cuda_stack, inventory
from imagekit.core.multiarch import ImageGroup, platform_tag
from imagekit.core.plan import ImagePlan, retarget
from imagekit.core.ports import Engine, Registry, RemoteManifest, RunStore, SbomMaker, Signer
from imagekit.core.records import Evidence, PublishRecord, PublishStatus, TagKind, TagRecord
from imagekit.errors import EngineError, RegistryError
from imagekit.events import Event, EventSink
from imagekit.orchestration.attest import sign_and_attest, with_attestation
from imagekit.orchestration.promote import Promotion, candidate_tag, said
from imagekit.orchestration.publish_index import IndexPublish


@dataclass(frozen=True)
class PublishSettings:
    """How to publish."""

    registry: str | None = None
    dry_run: bool = False
    force: bool = False
    # CI pipelines: push only `{tag}-candidate-{id}` (no aliases), or promote such a
    # candidate to the final tags inside the registry (no engine needed).
    candidate: str | None = None
    from_candidate: str | None = None


class PublishRun:
    """One `imagekit publish` over a list of plans."""

    def __init__(
        self,
        engine: Engine | None,
        registry: Registry,
        sbom: SbomMaker,
        store: RunStore,
        evidence: Sequence[Evidence],
        settings: PublishSettings,
        events: EventSink,
        signer: Signer | None = None,
    ) -> None:
        self.engine = engine
        self.registry = registry
        self.sbom = sbom
        self.store = store
        self.evidence = list(evidence)
        self.settings = settings
        self.events = events
        self.signer = signer  # None: publish unsigned, as before
        self.done: list[PublishRecord] = []
        self.engine_errors: list[EngineError] = []  # refusals that failed an image

    def _engine(self) -> Engine:
        """The engine local images are pushed from (a promotion needs none)."""
        if self.engine is None:
            raise ValueError("publishing a local image needs an engine; this run has none")
        return self.engine

    def publish(self, groups: Sequence[ImageGroup]) -> list[PublishRecord]:
        """Publish each image (`multiarch.image_groups`). One of a single platform goes under
        its tags (`publish_one`). The platforms of one image: each under its platform tag,
        then one index of them all under the image's tags (`publish_index`); as CI candidates,
        each platform only under its candidate platform tag (its own job pushes it), the index
        being assembled when the candidates are promoted."""
        done: list[PublishRecord] = []
        for group in groups:
            if not group.multi:
                done += [self.publish_one(plan) for plan in group.plans]
            elif self.settings.candidate:
                done += [self.publish_one(plan, one_platform=True) for plan in group.plans]
            elif self.settings.from_candidate:
                done.append(IndexPublish(self).promote(group.plans))
            else:
                done += IndexPublish(self).publish(group.plans)
        return done

    def publish_one(self, plan: ImagePlan, *, one_platform: bool = False) -> PublishRecord:
        """Gate, check and push one image; its record is written when this returns. An
        engine that refuses something fails this image (with its reason) and not the run.
        `one_platform`: the image is one platform of an index, pushed under its platform tag
        only (the index takes the image's tags)."""
        try:
            record = self._publish_one(plan, one_platform)
        except EngineError as exc:
            self.engine_errors.append(exc)
            record = PublishRecord(
                name=plan.name, status=PublishStatus.FAILED, reasons=(said(exc),)
            )
        return self.finished(plan.name, record)

    def finished(self, name: str, record: PublishRecord) -> PublishRecord:
        """Record `record` in publish.json and report it."""
        self.done.append(record)
        self.store.write_publish(self.done)
        message = record.status + (": " + "; ".join(record.reasons) if record.reasons else "")
        self.events(Event("finished", name, message, {"status": record.status}))
        return record

    def _publish_one(self, plan: ImagePlan, one_platform: bool = False) -> PublishRecord:
        s = self.settings
        repository = retarget(plan.repository, s.registry)
        if s.from_candidate:
            promotion = Promotion(
                self.registry, self.evidence, s.from_candidate, s.force, signer=self.signer
            )
            return promotion.promote(plan, repository)
        local = self._engine().inspect_image(plan.reference)
        if local is None:
            return PublishRecord(
                name=plan.name,
                status=PublishStatus.REFUSED,
                reasons=(f"{plan.reference} is not built here",),
            )
        decision = decide(plan, local.id, self.evidence, force=s.force)
        record = PublishRecord(
            name=plan.name,
            status=PublishStatus.REFUSED,
            image_id=local.id,
            reasons=decision.reasons,
            forced=bool(decision.reasons) and decision.allowed,
        )
        if not decision.allowed:
            return record
        todo = self.tags_for(plan)
        if one_platform:
            todo = [(platform_tag(todo[0][0], plan.platform), todo[0][1])]
        return self._push_all(plan, repository, local.id, record, decision, todo)

    def tags_for(self, plan: ImagePlan) -> list[tuple[str, TagKind]]:
        """The tags `plan` is published under, in order: a candidate's one, or the versioned
        tag and the aliases."""
        if self.settings.candidate:
            return [(candidate_tag(plan.tag, self.settings.candidate), "candidate")]
        return [(plan.tag, "versioned"), *((a, "alias") for a in plan.aliases)]

    def _push_all(
        self,
        plan: ImagePlan,
        repository: str,
        image_id: str,
        record: PublishRecord,
        decision: GateDecision,
        todo: list[tuple[str, TagKind]],
    ) -> PublishRecord:
        first = f"{repository}:{todo[0][0]}"
        try:
            remote = self.registry.manifest(first)
        except RegistryError as exc:
            return record.model_copy(
                update=dict(status=PublishStatus.FAILED, reasons=(*record.reasons, said(exc)))
            )
        tags: list[TagRecord] = []
        if remote is not None and not remote.holds(image_id):
            held = f", image {remote.config}" if remote.config else ""
            why = (
                f"{first} already exists with other content (registry digest {remote.digest}"
                f"{held}; this image is {image_id}); versioned tags are never overwritten"
            )
            return record.model_copy(update=dict(reasons=(*record.reasons, why)))
        if remote is not None:
            tags.append(
                TagRecord(
                    tag=first, kind=todo[0][1], status=PublishStatus.UNCHANGED, digest=remote.digest
                )
            )
            todo = todo[1:]
        if self.settings.dry_run:
            tags += [
                TagRecord(tag=f"{repository}:{t}", kind=k, status=PublishStatus.DRY_RUN)
                for t, k in todo
            ]
            return record.model_copy(update=dict(status=PublishStatus.DRY_RUN, tags=tuple(tags)))
        for tag, kind in todo:
            entry = self._push_tag(image_id, repository, tag, kind)
            tags.append(entry)
            if entry.status is not PublishStatus.PUBLISHED:
                return record.model_copy(
                    update=dict(
                        status=PublishStatus.FAILED,
                        tags=tuple(tags),
                        reasons=(*record.reasons, f"{repository}:{tag}: {entry.error}"),
                    )
                )
        pushed = any(t.status is PublishStatus.PUBLISHED for t in tags)
        digest = next(t.digest for t in tags if t.kind != "alias") or ""
        manifest_file, sbom_file, sbom = self._inventory(plan, image_id, digest, decision)
        done = record.model_copy(
            update=dict(
                status=PublishStatus.PUBLISHED if pushed else PublishStatus.UNCHANGED,
                tags=tuple(tags),
                manifest_file=manifest_file,
                sbom_file=sbom_file,
            )
        )
        if self.signer is None or not digest:
            return done
        # Each run with a key signs again (an unchanged image too): a run whose signing failed
        # is repaired by running it again, and a check accepts any signature by the key.
        passing = [decision.passing] if decision.passing is not None else []
        attested = sign_and_attest(self.signer, repository, digest, passing, sbom)
        return with_attestation(done, attested)

    def _push_tag(self, image_id: str, repository: str, tag: str, kind: TagKind) -> TagRecord:
        reference = f"{repository}:{tag}"
        before: RemoteManifest | None = None
        if kind == "alias":
            try:
                before = self.registry.manifest(reference)
            except RegistryError:
                before = None  # the push below reports what is wrong with the registry
        self._engine().tag(image_id, repository, tag)
        started = time.monotonic()
        outcome = self.registry.push(reference)
        entry = TagRecord(
            tag=reference,
            kind=kind,
            status=PublishStatus.FAILED,
            attempts=outcome.attempts,
            errors=outcome.errors,
            duration_s=round(time.monotonic() - started, 3),
        )
        if not outcome.ok:
            return entry.model_copy(update=dict(error=f"{outcome.kind}: {outcome.error}"))
        try:
            after = self.registry.manifest(reference)
        except RegistryError as exc:
            return entry.model_copy(
                update=dict(error=f"pushed, but the digest could not be read back: {said(exc)}")
            )
        if after is None or not after.holds(image_id):
            return entry.model_copy(
                update=dict(error="the registry does not show the pushed image")
            )
        return entry.model_copy(
            update=dict(
                status=PublishStatus.PUBLISHED,
                digest=after.digest,
                moved_from=(before.digest if before else None) if kind == "alias" else None,
            )
        )

    def _inventory(
        self, plan: ImagePlan, image_id: str, digest: str, decision: GateDecision
    ) -> tuple[str, str, dict[str, Any]]:
        """The image's Python and OS packages, and one CycloneDX SBOM of both (the CUDA stack
        on torch and the nvidia-* wheels); the files written, and the SBOM."""
        engine = self._engine()
        pip = engine.output_of(image_id, ["python3", "-m", "pip", "list", "--format", "json"])
        dpkg = engine.output_of(image_id, ["dpkg-query", "-W", "-f", DPKG_FORMAT])
        os_release = engine.output_of(image_id, ["cat", "/etc/os-release"])
        local = engine.inspect_image(image_id)
        facts = decision.passing.record.env_facts if decision.passing is not None else {}
        stack = cuda_stack(local.imagekit, facts) if local is not None else {}
        held = inventory(
            plan.reference,
            digest,
            image_id,
            pip_json=pip,
            dpkg=dpkg,
            os_release=os_release,
            stack=stack,
        )
        manifest: dict[str, Any] = {
            "image": plan.reference,
            "image_id": image_id,
            "digest": digest,
            "distro": held.distro,
            "python_packages": json.loads(pip or "[]"),
            "os_packages": [
                {"name": p.name, "version": p.version, "arch": p.arch} for p in held.os_packages
            ],
        }
        document = self.sbom.image_sbom(held)
        manifest_file = self.store.write_artifact(f"publish/{plan.name}.packages.json", manifest)
        sbom_file = self.store.write_artifact(f"publish/{plan.name}.cdx.json", document)
        return str(manifest_file), str(sbom_file), document
