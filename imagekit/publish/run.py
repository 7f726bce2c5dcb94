"""The use case of `imagekit publish`: gate, immutable versioned tags, moving aliases, records.

For each image: the local image must exist and pass the gate (verify results for
this exact image id, tags equal to the probed facts; and, when the matrix has a `security:`
section, an audit against the security index, run now); its versioned tag must not
exist on the registry with other content (same content: a no-op); then every tag
is pushed, its digest read back from the registry, a package manifest and a
CycloneDX SBOM of the whole image written, and everything recorded in
results/<run-id>/publish.json. With a signer (a signing key), the digest is signed and the
verify record that passed the gate and the SBOM are attached to it as attestations.

One publisher per mode (`core.publish.PublishMode`), picked once by `publish_images`:
`PushRun` (the final tags; the platforms of one image then one index of them), `CandidatePush`
(a CI candidate's tag only) and, inside the registry without an engine, `promote.Promotion`.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from imagekit import __version__
from imagekit.audit.attestation import AUDIT_PREDICATE, AuditPredicate
from imagekit.audit.run import AuditRun
from imagekit.audit.settings import AuditTarget
from imagekit.errors import EngineError, ImagekitError, RegistryError
from imagekit.kernel.engine import Engine, LocalImage
from imagekit.kernel.json import JsonObject, JsonValue
from imagekit.kernel.publish_records import PublishRecord, PublishStatus, TagRecord
from imagekit.kernel.records import AuditRecord
from imagekit.kernel.vocabulary import TagKind
from imagekit.matrix.plan import ImagePlan
from imagekit.publish.attest_run import UNSIGNED, sign_and_attest
from imagekit.publish.decisions import (
    PublishMode,
    Pushed,
    candidate_tag,
    candidate_tags,
    final_tags,
    platform_tags,
    publish_failure,
    pushed_or_unchanged,
    said,
)
from imagekit.publish.gate import GateDecision, decide
from imagekit.publish.index import IndexPut
from imagekit.publish.inventory import DPKG_FORMAT, cuda_stack, inventory
from imagekit.publish.log import PublishLog
from imagekit.publish.multiarch import ImageGroup
from imagekit.publish.patches import own_target
from imagekit.publish.ports import PublishPorts, RemoteManifest
from imagekit.publish.promote import Promotion
from imagekit.publish.provenance import PROVENANCE_PREDICATE, provenance
from imagekit.publish.requests import PublishSettings

# `candidate_tag` is named here too: callers of the publish use case read it from this module.
__all__ = [
    "CandidatePush",
    "LocalPush",
    "PublishOutcome",
    "PublishPorts",
    "PublishSettings",
    "PushRun",
    "candidate_tag",
    "publish_images",
]

Tags = Sequence[tuple[str, TagKind]]


@dataclass(frozen=True)
class PublishOutcome:
    """What one publish did: a record per image (and per index), and the engine's refusals
    that failed an image."""

    records: tuple[PublishRecord, ...]
    engine_errors: tuple[EngineError, ...] = ()

    def failure(self) -> ImagekitError | None:
        """The error the publish ends with (its exit code and message), or None."""
        return publish_failure(self.records, self.engine_errors)


def publish_images(
    settings: PublishSettings,
    groups: Sequence[ImageGroup],
    ports: PublishPorts,
    engine: Engine | None,
) -> PublishOutcome:
    """Publish each image (`multiarch.image_groups`) as `settings` say, by the publisher of
    its mode, each image's record written as it finishes. `engine`: where local images are
    pushed from; a promotion works inside the registry and takes none."""
    log = PublishLog(ports.store, ports.events)
    if settings.mode is PublishMode.PROMOTION:
        return PublishOutcome(tuple(Promotion(ports, settings, log).publish(groups)))
    if engine is None:
        raise ValueError(f"a {settings.mode} publish pushes local images: it needs an engine")
    kind = CandidatePush if settings.mode is PublishMode.CANDIDATE else PushRun
    pusher = kind(engine, ports, settings, log)
    done = pusher.publish(groups)
    return PublishOutcome(tuple(done), tuple(pusher.engine_errors))


class OsPackageJson(TypedDict):
    """One Debian package of an image."""

    name: str
    version: str
    arch: str


class PackagesManifest(TypedDict):
    """`publish/NAME.packages.json`: what a published image holds, beside its SBOM."""

    image: str
    image_id: str
    digest: str
    distro: str
    python_packages: list[JsonObject]  # `pip list --format json`, as pip wrote it
    os_packages: list[OsPackageJson]


class LocalPush:
    """Pushes local images from an engine, each gated on its verify records (the push and
    candidate modes); `publish` is each mode's own."""

    def __init__(
        self, engine: Engine, ports: PublishPorts, settings: PublishSettings, log: PublishLog
    ) -> None:
        self.engine = engine
        self.registry = ports.registry
        self.ports = ports
        self.settings = settings
        self.log = log
        self.engine_errors: list[EngineError] = []  # refusals that failed an image
        # The gate's audit, recorded in this run's folder beside the publish record.
        self.auditor = AuditRun(ports.audit.ports, ports.audit.settings) if ports.audit else None
        self.today = dt.datetime.now(dt.UTC).date()  # against each release's end_of_patch

    def publish(self, groups: Sequence[ImageGroup]) -> list[PublishRecord]:
        """Publish each image (`multiarch.image_groups`) as this mode does."""
        raise NotImplementedError

    def publish_one(self, plan: ImagePlan, tags: Tags) -> PublishRecord:
        """Gate, check and push one image under `tags`; its record is written when this
        returns. An engine that refuses something fails this image (with its reason) and not
        the run."""
        try:
            record = self._publish_one(plan, tags)
        except EngineError as exc:
            self.engine_errors.append(exc)
            record = PublishRecord(
                name=plan.name, status=PublishStatus.FAILED, reasons=(said(exc),)
            )
        return self.log.finished(plan.name, record)

    def _publish_one(self, plan: ImagePlan, tags: Tags) -> PublishRecord:
        local = self.engine.inspect_image(plan.reference)
        if local is None:
            why = f"{plan.reference} is not built here"
            return PublishRecord(name=plan.name, status=PublishStatus.REFUSED, reasons=(why,))
        audit = self.auditor.audit(AuditTarget(plan.name, plan.reference)) if self.auditor else None
        decision = decide(
            plan, local.id, self.ports.evidence, force=self.settings.force, audit=audit
        )
        forced = bool(decision.reasons) and decision.allowed
        pushed = Pushed(PublishStatus.REFUSED)
        if decision.allowed:
            pushed = self._push_all(plan, local.id, tags)
        if not pushed.reached:
            return PublishRecord(
                name=plan.name,
                status=pushed.status,
                image_id=local.id,
                reasons=(*decision.reasons, *pushed.reasons),
                forced=forced,
                tags=pushed.tags,
            )
        return self._inventoried(plan, local, decision, pushed, forced, audit)

    def _more(
        self, local: LocalImage, repository: str, digest: str, audit: AuditRecord | None
    ) -> list[tuple[str, Mapping[str, JsonValue]]]:
        """The attestations besides the verify records and the SBOM: the provenance of the
        build that made this very image (where results/ holds it), and the gate's audit."""
        more: list[tuple[str, Mapping[str, JsonValue]]] = []
        build = next((b for b in self.ports.builds if b.record.image_id == local.id), None)
        if build is not None:
            body = provenance(build, local.labels, imagekit_version=__version__)
            more.append((PROVENANCE_PREDICATE, body))
        if audit is not None:
            said = AuditPredicate(
                reference=repository, digest=digest, audit=audit, imagekit_version=__version__
            )
            more.append((AUDIT_PREDICATE, said.to_json()))
        return more

    def _inventoried(
        self,
        plan: ImagePlan,
        local: LocalImage,
        decision: GateDecision,
        pushed: Pushed,
        forced: bool,
        audit: AuditRecord | None,
    ) -> PublishRecord:
        """The record of an image on the registry: its package manifest and SBOM written,
        its digest signed (with a signer)."""
        repository, image_id = self.settings.repository(plan), local.id
        digest = next(t.digest for t in pushed.tags if t.kind != TagKind.ALIAS) or ""
        manifest_file, sbom_file, sbom = self._inventory(plan, image_id, digest, decision)
        attested = UNSIGNED
        if self.ports.signer is not None and digest:
            # Each run with a key signs again (an unchanged image too): a run whose signing
            # failed is repaired by running it again, and a check accepts any signature by the
            # key.
            passing = [decision.passing] if decision.passing is not None else []
            more = self._more(local, repository, digest, audit)
            attested = sign_and_attest(self.ports.signer, repository, digest, passing, sbom, more)
        return PublishRecord(
            name=plan.name,
            status=attested.status(pushed.status),
            image_id=image_id,
            reasons=attested.reasons(decision.reasons),
            forced=forced,
            tags=pushed.tags,
            manifest_file=manifest_file,
            sbom_file=sbom_file,
            signed_digest=attested.digest,
            attestations=attested.types,
        )

    def _push_all(self, plan: ImagePlan, image_id: str, todo: Tags) -> Pushed:
        """Push `todo` in order: refused when the first (versioned) tag holds other content,
        unless `--patch` publishes it as the next patch tag; unchanged where it holds this
        image already; stops at the first push that fails."""
        repository = self.settings.repository(plan)
        patch = self.settings.patch and todo[0] == (plan.tag, TagKind.VERSIONED)
        try:
            target = own_target(
                self.registry,
                f"{repository}:{todo[0][0]}",
                plan,
                lambda held: held.holds(image_id),
                patch=patch,
                today=self.today,
                this=f"this image is {image_id}",
            )
        except RegistryError as exc:
            return Pushed(PublishStatus.FAILED, (), (said(exc),))
        if target.refused:
            return Pushed(PublishStatus.REFUSED, (), (target.refused,))
        kind = target.kind if target.kind is TagKind.PATCH else todo[0][1]
        todo = [(target.tag, kind), *todo[1:]]
        tags: list[TagRecord] = []
        if target.held is not None:
            first = f"{repository}:{target.tag}"
            status = PublishStatus.UNCHANGED
            tags.append(TagRecord(tag=first, kind=kind, status=status, digest=target.held.digest))
            todo = todo[1:]
        if self.settings.dry_run:
            tags += [
                TagRecord(tag=f"{repository}:{t}", kind=k, status=PublishStatus.DRY_RUN)
                for t, k in todo
            ]
            return Pushed(PublishStatus.DRY_RUN, tuple(tags))
        for tag, kind in todo:
            entry = self._push_tag(image_id, repository, tag, kind)
            tags.append(entry)
            if not entry.status.ok:
                why = f"{repository}:{tag}: {entry.error}"
                return Pushed(PublishStatus.FAILED, tuple(tags), (why,))
        return Pushed(pushed_or_unchanged(tags), tuple(tags))

    def _push_tag(self, image_id: str, repository: str, tag: str, kind: TagKind) -> TagRecord:
        reference = f"{repository}:{tag}"
        before: RemoteManifest | None = None
        if kind == TagKind.ALIAS:
            try:
                before = self.registry.manifest(reference)
            except RegistryError:
                before = None  # the push below reports what is wrong with the registry
            if before is not None and before.holds(image_id):
                # The alias already names this image (a rebuild of the same bytes): no push.
                status = PublishStatus.UNCHANGED
                return TagRecord(tag=reference, kind=kind, status=status, digest=before.digest)
        self.engine.tag(image_id, repository, tag)
        started = time.monotonic()
        outcome = self.registry.push(reference)
        after: RemoteManifest | None = None
        if not outcome.ok:
            error = f"{outcome.kind}: {outcome.error}"
        else:
            try:
                after = self.registry.manifest(reference)
                shown = after is not None and after.holds(image_id)
                error = "" if shown else "the registry does not show the pushed image"
            except RegistryError as exc:
                error = f"pushed, but the digest could not be read back: {said(exc)}"
        return TagRecord(
            tag=reference,
            kind=kind,
            status=PublishStatus.FAILED if error else PublishStatus.PUBLISHED,
            digest=after.digest if after is not None and not error else None,
            attempts=outcome.attempts,
            errors=outcome.errors,
            duration_s=round(time.monotonic() - started, 3),
            error=error or None,
            moved_from=before.digest if before is not None and not error else None,
        )

    def _inventory(
        self, plan: ImagePlan, image_id: str, digest: str, decision: GateDecision
    ) -> tuple[str, str, JsonObject]:
        """The image's Python and OS packages, and one CycloneDX SBOM of both (the CUDA stack
        on torch and the nvidia-* wheels); the files written, and the SBOM."""
        engine = self.engine
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
        manifest: PackagesManifest = {
            "image": plan.reference,
            "image_id": image_id,
            "digest": digest,
            "distro": held.distro,
            "python_packages": json.loads(pip or "[]"),
            "os_packages": [
                {"name": p.name, "version": p.version, "arch": p.arch} for p in held.os_packages
            ],
        }
        document = self.ports.sbom.image_sbom(held)
        manifest_file = self.ports.store.write_artifact(
            f"publish/{plan.name}.packages.json", manifest
        )
        sbom_file = self.ports.store.write_artifact(f"publish/{plan.name}.cdx.json", document)
        return str(manifest_file), str(sbom_file), document


class PushRun(LocalPush):
    """`imagekit publish`: each image under its versioned tag and aliases."""

    def publish(self, groups: Sequence[ImageGroup]) -> list[PublishRecord]:
        """Publish each image. One of a single platform goes under its tags. The platforms of
        one image: each under its platform tag, then one index of them all under the image's
        tags (`IndexPut`)."""
        done: list[PublishRecord] = []
        for group in groups:
            if not group.multi:
                done += [self.publish_one(plan, final_tags(plan)) for plan in group.plans]
                continue
            if self.settings.patch:
                name = group.plans[0].name
                done.append(self.log.finished(name, _patch_through_candidates(name)))
                continue
            pushed = [self.publish_one(plan, platform_tags(plan)) for plan in group.plans]
            index = IndexPut(self.ports, self.settings).record(group.plans, pushed)
            done += [*pushed, self.log.finished(index.name, index)]
        return done


def _patch_through_candidates(name: str) -> PublishRecord:
    """A multi-platform image is patched as CI publishes it: each platform pushed with
    --candidate, then joined and published with --from-candidate ID --patch."""
    why = (
        "a multi-platform image is patched through candidates: push each platform with "
        "--candidate ID, then publish --from-candidate ID --patch"
    )
    return PublishRecord(name=name, status=PublishStatus.REFUSED, reasons=(why,))


class CandidatePush(LocalPush):
    """`imagekit publish --candidate ID`: each image only under its CI candidate tag, before
    the other jobs verify it; `--from-candidate ID` promotes it later."""

    def publish(self, groups: Sequence[ImageGroup]) -> list[PublishRecord]:
        """Push each selected image (or platform of one: its own job pushes each, and the
        promotion assembles their index) under its candidate tag."""
        candidate = self.settings.candidate_id
        return [
            self.publish_one(plan, candidate_tags(plan, candidate, multi=group.multi))
            for group in groups
            for plan in group.plans
        ]
