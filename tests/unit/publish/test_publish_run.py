"""Publish over the fakes: the gate, immutable tags, aliases, candidates and push errors."""

from __future__ import annotations

import json
from hashlib import sha256
from pathlib import Path
from typing import Any

import pytest

from imagekit.audit.debian import Offered
from imagekit.audit.ports import AuditPorts, AuditWith
from imagekit.audit.settings import AuditSettings
from imagekit.kernel.publish_records import Evidence, PublishStatus
from imagekit.kernel.records import Status, Timings, VerifyRecord
from imagekit.kernel.vocabulary import PushFailure
from imagekit.matrix.load import load_matrix
from imagekit.matrix.plan import ImagePlan
from imagekit.publish.decisions import final_tags
from imagekit.publish.log import PublishLog
from imagekit.publish.multiarch import ImageGroup
from imagekit.publish.ports import ManifestDocument, PushOutcome, RemoteManifest
from imagekit.publish.requests import PublishSettings
from imagekit.publish.run import PublishPorts, PushRun, candidate_tag, publish_images
from tests.fakes import (
    OCI_INDEX,
    OCI_MANIFEST,
    Events,
    FakeContents,
    FakeEngine,
    FakeIndexes,
    FakeRegistry,
    FakeSbom,
    image_id,
    passing,
    store,
)

ROOT = Path(__file__).resolve().parents[3]
CPU_FACTS = {"torch": "2.13.0+cpu", "cuda": None, "python": "3.11.2"}


@pytest.fixture
def slim() -> ImagePlan:
    return next(p for p in load_matrix(ROOT / "examples" / "cpu.yaml").plans if p.flavour == "slim")


def verified(image: str, plan: ImagePlan, status: Status = Status.PASS) -> Evidence:
    """A verify record of `image` in which every required probe ended with `status`."""
    probes = [passing("env", CPU_FACTS)]
    for name in plan.required_probes[1:]:
        probes.append(
            passing(name)
            if status is Status.PASS
            else passing(name).model_copy(update={"status": status, "checks": ()})
        )
    record = VerifyRecord(
        image_id=image,
        reference=plan.reference,
        labels={},
        device="cpu",
        status="pass" if status is Status.PASS else "fail",
        probes=tuple(probes),
        timings=Timings(
            container_start_s=0, probe_wall_s=1, verify_wall_s=1, timeout_s=60, timed_out=False
        ),
    )
    return Evidence("20261130T000000Z-aaaa", plan.name, record)


def settings(
    candidate: str | None = None, from_candidate: str | None = None, **options: Any
) -> PublishSettings:
    """The settings of `imagekit publish` with these options."""
    return PublishSettings(candidate=candidate, from_candidate=from_candidate, **options)


class World:
    """An engine holding the slim image, a registry, and the publish run over them."""

    def __init__(self, tmp_path: Path, plan: ImagePlan) -> None:
        self.engine = FakeEngine(outputs={"python3": '[{"name": "torch", "version": "2.13.0"}]'})
        self.image = self.engine.add(plan.reference, image_id("slim")).id
        self.registry = FakeRegistry(self.engine)
        self.events = Events()
        self.store = store(tmp_path)
        self.plan = plan
        self.repository = plan.repository

        self.audit: AuditWith | None = None

    def ports(self, evidence: list[Evidence]) -> PublishPorts:
        sbom = FakeSbom()
        return PublishPorts(
            self.registry, self.store, evidence, self.events, sbom, None, self.audit
        )

    def audited(self, offered: dict[str, Offered]) -> FakeIndexes:
        """The gate audits each image against a security suite offering `offered`."""
        indexes = FakeIndexes(offered)
        ports = AuditPorts(self.engine, FakeContents(), indexes, self.store, self.events)
        self.audit = AuditWith(ports, AuditSettings(now="2026-12-07T12:00:00+00:00"))
        return indexes

    def publish(self, evidence: list[Evidence], **options: Any) -> Any:
        chosen = settings(**options)
        group = ImageGroup((self.plan,), 1)
        return publish_images(chosen, [group], self.ports(evidence), self.engine).records[0]


def test_an_image_verified_to_pass_is_pushed_under_every_tag_with_its_digest(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    record = world.publish([verified(world.image, slim)])
    assert record.status is PublishStatus.PUBLISHED and not record.reasons
    pushed = [t.tag for t in record.tags]
    assert pushed == [f"{slim.repository}:{t}" for t in (slim.tag, *slim.aliases)]
    assert all(t.digest == world.registry.tags[t.tag].digest for t in record.tags)
    written = json.loads((world.store.root / "publish.json").read_text())
    assert written[0]["status"] == "published"
    assert record.sbom_file is not None
    assert json.loads(Path(record.sbom_file).read_text())["components"] == [{"name": "torch"}]


def test_with_a_security_section_an_image_lacking_a_fix_is_refused_and_its_audit_kept(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    indexes = world.audited(
        {"libssl3:amd64": Offered("libssl3", "3.0.22-1~deb12u2", "amd64", "openssl")}
    )
    record = world.publish([verified(world.image, slim)])
    assert record.status is PublishStatus.REFUSED and world.registry.pushed == []
    assert record.reasons[0].startswith(
        "security: 1 findings at any-fix: libssl3 3.0.20-1~deb12u2 -> 3.0.22-1~deb12u2"
    )
    assert "bootstrap the base again" in record.reasons[-1]
    assert [s.suite for s in indexes.asked] == ["bookworm-security"]
    kept = json.loads((world.store.root / "images" / f"{slim.name}.json").read_text())
    assert kept["audit"]["status"] == "fail" and kept["audit"]["image_id"] == world.image
    # Nothing newer in the suite: the same image is published.
    world.audited({})
    assert world.publish([verified(world.image, slim)]).status is PublishStatus.PUBLISHED


def test_an_image_without_evidence_is_refused_and_nothing_is_pushed(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    other = verified(image_id("another image"), slim)
    record = world.publish([other])
    assert record.status is PublishStatus.REFUSED
    assert "no verify results for image" in record.reasons[0]
    assert "1 results belong to other image ids" in record.reasons[0]
    assert world.registry.pushed == []


def test_an_image_whose_required_probe_failed_is_refused(tmp_path: Path, slim: ImagePlan) -> None:
    world = World(tmp_path, slim)
    record = world.publish([verified(world.image, slim, Status.FAIL)])
    assert record.status is PublishStatus.REFUSED
    assert "autograd fail" in record.reasons[0]
    assert world.registry.pushed == []


def test_force_publishes_despite_the_gate_and_says_so(tmp_path: Path, slim: ImagePlan) -> None:
    world = World(tmp_path, slim)
    record = world.publish([], force=True)
    assert record.status is PublishStatus.PUBLISHED and record.forced
    assert record.reasons  # the overridden reasons stay on the record


def test_a_versioned_tag_holding_other_content_is_never_overwritten(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    versioned = f"{slim.repository}:{slim.tag}"
    world.registry.tags[versioned] = RemoteManifest(image_id("m"), image_id("other content"))
    record = world.publish([verified(world.image, slim)])
    assert record.status is PublishStatus.REFUSED
    assert "already exists with other content" in record.reasons[-1]
    assert world.registry.pushed == []


def test_the_same_content_under_the_versioned_tag_is_unchanged_and_aliases_move(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    versioned = f"{slim.repository}:{slim.tag}"
    world.registry.tags[versioned] = RemoteManifest(image_id("m"), world.image)
    alias = f"{slim.repository}:{slim.aliases[0]}"
    world.registry.tags[alias] = RemoteManifest(image_id("old"), image_id("old content"))
    record = world.publish([verified(world.image, slim)])
    assert record.status is PublishStatus.PUBLISHED
    assert record.tags[0].status is PublishStatus.UNCHANGED
    assert versioned not in world.registry.pushed
    moved = next(t for t in record.tags if t.tag == alias)
    assert moved.moved_from == image_id("old")


def test_tags_that_already_name_the_image_are_unchanged_and_nothing_is_pushed(
    tmp_path: Path, slim: ImagePlan
) -> None:
    """A rebuild of the same bytes (the same digest) republished: no tag moves, no push."""
    world = World(tmp_path, slim)
    for tag in (slim.tag, *slim.aliases):
        world.registry.tags[f"{slim.repository}:{tag}"] = RemoteManifest(image_id("m"), world.image)
    record = world.publish([verified(world.image, slim)])
    assert record.status is PublishStatus.UNCHANGED
    assert [t.status for t in record.tags] == [PublishStatus.UNCHANGED] * (1 + len(slim.aliases))
    assert all(t.moved_from is None for t in record.tags)
    assert world.registry.pushed == []


def test_a_push_that_keeps_failing_fails_the_image_with_the_registry_reason(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    world.registry.failures.append(
        PushOutcome(
            False, 4, "received unexpected HTTP status: 503", PushFailure.TRANSIENT, ("503",) * 4
        )
    )
    record = world.publish([verified(world.image, slim)])
    assert record.status is PublishStatus.FAILED
    assert "transient: received unexpected HTTP status: 503" in record.reasons[-1]
    assert record.tags[0].attempts == 4


def test_an_unreachable_registry_fails_the_image_without_a_push(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    world.registry.unreachable = True
    record = world.publish([verified(world.image, slim)])
    assert record.status is PublishStatus.FAILED
    assert "cannot reach the registry" in record.reasons[-1]


def test_a_dry_run_checks_everything_and_pushes_nothing(tmp_path: Path, slim: ImagePlan) -> None:
    world = World(tmp_path, slim)
    record = world.publish([verified(world.image, slim)], dry_run=True)
    assert record.status is PublishStatus.DRY_RUN
    assert {t.status for t in record.tags} == {PublishStatus.DRY_RUN}
    assert world.registry.pushed == [] and world.engine.tagged == []


def test_a_candidate_run_pushes_only_the_candidate_tag(tmp_path: Path, slim: ImagePlan) -> None:
    world = World(tmp_path, slim)
    record = world.publish([verified(world.image, slim)], candidate="123")
    assert world.registry.pushed == [f"{slim.repository}:{candidate_tag(slim.tag, '123')}"]
    assert [t.kind for t in record.tags] == ["candidate"]


def _candidate(world: World, candidate: str, image: str | None = None) -> ManifestDocument:
    """A candidate in the registry, as `publish --candidate` leaves it, holding `image`."""
    config = image or world.image
    body = json.dumps({"mediaType": OCI_MANIFEST, "config": {"digest": config}}).encode()
    document = ManifestDocument(OCI_MANIFEST, body, "sha256:" + sha256(body).hexdigest(), config)
    world.registry.documents[f"{world.repository}:{candidate_tag(world.plan.tag, candidate)}"] = (
        document
    )
    return document


def test_promotion_puts_the_candidates_own_manifest_under_every_tag_without_an_engine(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    candidate = _candidate(world, "7")
    ports = world.ports([verified(world.image, slim)])
    done = publish_images(settings(from_candidate="7"), [ImageGroup((slim,), 1)], ports, None)
    record = done.records[0]
    assert record.status is PublishStatus.PUBLISHED, record.reasons
    final = [f"{slim.repository}:{t}" for t in (slim.tag, *slim.aliases)]
    assert world.registry.put_tags == final
    assert all(world.registry.documents[t].body == candidate.body for t in final)
    assert {t.digest for t in record.tags} == {candidate.digest}
    assert world.registry.pushed == []


def test_promotion_is_refused_when_the_candidate_holds_an_image_no_record_passed(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    _candidate(world, "7", image=image_id("rebuilt elsewhere"))
    record = world.publish([verified(world.image, slim)], from_candidate="7")
    assert record.status is PublishStatus.REFUSED
    assert "no verify results for image" in record.reasons[0]
    assert world.registry.put_tags == []


def test_promotion_is_refused_when_the_record_of_the_candidate_failed(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    _candidate(world, "7")
    record = world.publish([verified(world.image, slim, Status.FAIL)], from_candidate="7")
    assert record.status is PublishStatus.REFUSED and world.registry.put_tags == []


def test_on_the_containerd_store_the_pushed_manifest_is_the_image_and_tags_stay_immutable(
    tmp_path: Path, slim: ImagePlan
) -> None:
    # There the image id is the manifest digest, and the registry's config digest is another
    # hash: comparing it with the id read every push as "the registry does not show the
    # pushed image" and every later publish as "already exists with other content".
    world = World(tmp_path, slim)
    world.registry.containerd_store = True
    record = world.publish([verified(world.image, slim)])
    assert record.status is PublishStatus.PUBLISHED, record.reasons
    assert record.tags[0].digest == world.image
    again = world.publish([verified(world.image, slim)])
    assert again.tags[0].status is PublishStatus.UNCHANGED and not again.reasons
    rebuilt = world.engine.add(slim.reference, image_id("slim, rebuilt")).id
    refused = world.publish([verified(rebuilt, slim)])
    assert refused.status is PublishStatus.REFUSED
    assert "already exists with other content" in refused.reasons[-1]


def test_promotion_gates_an_index_pushed_from_the_containerd_store_by_its_own_digest(
    tmp_path: Path, slim: ImagePlan
) -> None:
    # The verify record names the image by the index digest the engine gave it (buildx on
    # the containerd store makes an index with an attestation manifest).
    world = World(tmp_path, slim)
    amd = _candidate(world, "amd")
    children = [{"digest": amd.digest, "platform": {"os": "linux", "architecture": "amd64"}}]
    body = json.dumps({"mediaType": OCI_INDEX, "manifests": children}).encode()
    index = ManifestDocument(
        OCI_INDEX,
        body,
        "sha256:" + sha256(body).hexdigest(),
        children=((amd.digest, "linux/amd64"),),
    )
    world.registry.documents[f"{slim.repository}@{amd.digest}"] = amd
    world.registry.documents[f"{slim.repository}:{candidate_tag(slim.tag, '9')}"] = index
    other = world.publish([verified(image_id("another index"), slim)], from_candidate="9")
    assert other.status is PublishStatus.REFUSED
    assert other.reasons[0].startswith("linux/amd64: no verify results")
    record = world.publish([verified(index.digest, slim)], from_candidate="9")
    assert record.status is PublishStatus.PUBLISHED, record.reasons


def test_promotion_of_an_index_gates_every_platform(tmp_path: Path, slim: ImagePlan) -> None:
    world = World(tmp_path, slim)
    amd = _candidate(world, "amd")
    arm_image = image_id("arm64 image")
    arm = _candidate(world, "arm", image=arm_image)
    children = [
        {"digest": amd.digest, "platform": {"os": "linux", "architecture": "amd64"}},
        {"digest": arm.digest, "platform": {"os": "linux", "architecture": "arm64"}},
    ]
    body = json.dumps({"mediaType": OCI_INDEX, "manifests": children}).encode()
    index = ManifestDocument(
        OCI_INDEX,
        body,
        "sha256:" + sha256(body).hexdigest(),
        children=((amd.digest, "linux/amd64"), (arm.digest, "linux/arm64")),
    )
    for child in (amd, arm):
        world.registry.documents[f"{slim.repository}@{child.digest}"] = child
    world.registry.documents[f"{slim.repository}:{candidate_tag(slim.tag, '9')}"] = index
    refused = world.publish([verified(world.image, slim)], from_candidate="9")
    assert refused.status is PublishStatus.REFUSED
    assert refused.reasons[0].startswith("linux/arm64: no verify results")
    both = [verified(world.image, slim), verified(arm_image, slim)]
    record = world.publish(both, from_candidate="9")
    assert record.status is PublishStatus.PUBLISHED
    assert world.registry.documents[f"{slim.repository}:{slim.tag}"].digest == index.digest


def test_promotion_never_overwrites_a_versioned_tag_holding_other_content(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    _candidate(world, "7")
    versioned = f"{slim.repository}:{slim.tag}"
    world.registry.tags[versioned] = RemoteManifest(image_id("m"), image_id("other content"))
    record = world.publish([verified(world.image, slim)], from_candidate="7")
    assert record.status is PublishStatus.REFUSED
    assert "already exists with other content" in record.reasons[-1]
    assert world.registry.put_tags == []


def test_a_promotion_again_is_unchanged(tmp_path: Path, slim: ImagePlan) -> None:
    world = World(tmp_path, slim)
    _candidate(world, "7")
    world.publish([verified(world.image, slim)], from_candidate="7")
    again = world.publish([verified(world.image, slim)], from_candidate="7")
    assert again.status is PublishStatus.UNCHANGED
    assert {t.status for t in again.tags} == {PublishStatus.UNCHANGED}


def test_promotion_without_a_candidate_says_to_push_one_first(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    record = world.publish([verified(world.image, slim)], from_candidate="404")
    assert record.status is PublishStatus.FAILED
    assert "push it with --candidate first" in record.reasons[0]


def test_an_engine_refusal_fails_that_image_and_the_next_image_is_still_published(
    tmp_path: Path, slim: ImagePlan
) -> None:
    from imagekit.errors import EngineError

    world = World(tmp_path, slim)
    refusing = world.engine.tag

    def tag(image: str, repository: str, name: str) -> None:
        raise EngineError("the engine at unix:///x refused while tagging: no space left")

    world.engine.tag = tag  # type: ignore[method-assign]
    log = PublishLog(world.store, world.events)
    run = PushRun(world.engine, world.ports([verified(world.image, slim)]), settings(), log)
    failed = run.publish_one(slim, final_tags(slim))
    assert failed.status is PublishStatus.FAILED and "no space left" in failed.reasons[0]
    assert [e.message for e in run.engine_errors] == [
        "the engine at unix:///x refused while tagging: no space left"
    ]
    world.engine.tag = refusing  # type: ignore[method-assign]
    assert run.publish_one(slim, final_tags(slim)).status is PublishStatus.PUBLISHED
    written = json.loads((world.store.root / "publish.json").read_text())
    assert [r["status"] for r in written] == ["failed", "published"]
