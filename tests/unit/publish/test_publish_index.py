"""Multi-platform publishing: one index under an image's tags, one manifest per platform.

`multiarch.image_groups` groups the selected plans by image (the platforms of one image share
its tag; each `ImageGroup` knows how many platforms its image has) and refuses a selection that
holds only some platforms of an image, unless `partial` (CI candidates); `platform_tag` names
the tag each platform's manifest is pushed under; `index_document` writes the index
canonically, so the same manifests always make the same bytes and digest.

`publish_images` (`PushRun`) pushes each platform only under its platform tag, gated on its own
verify record, then puts one index of their manifests (a record of its own,
`<shared id>-<flavour>-index`) under the versioned tag and the aliases; the versioned tag stays
immutable for indexes, an alias moves, a dry run puts nothing, a registry that rewrites the index
or fails part-way fails it, and with a signer the index digest is signed and each platform's
passing record attested to it. With `--candidate` each platform goes only under its candidate
platform tag (no index: each platform's CI job pushes its own); `--from-candidate` joins those in
one index under the candidate tag and promotes it, gated per platform. A single-platform image
publishes as before.

The examples' own matrices give the plans: examples/cuda-local.yaml builds slim and full for
linux/amd64 and linux/arm64, examples/cpu.yaml for linux/amd64 alone. No engine, no network.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from imagekit.errors import InputError, RegistryError
from imagekit.kernel.publish_records import Evidence, PublishRecord, PublishStatus, TagRecord
from imagekit.kernel.records import Timings, VerifyRecord
from imagekit.matrix.load import Matrix, load_matrix
from imagekit.matrix.plan import ImagePlan
from imagekit.publish.attest import SBOM_PREDICATE, VERIFY_PREDICATE, VerifyPredicate
from imagekit.publish.decisions import candidate_tag
from imagekit.publish.gate import Problem, remedy
from imagekit.publish.multiarch import (
    DOCKER_LIST,
    DOCKER_MANIFEST,
    OCI_INDEX,
    ImageGroup,
    PlatformManifest,
    image_groups,
    index_document,
    platform_tag,
)
from imagekit.publish.ports import ManifestDocument, RemoteManifest
from imagekit.publish.run import PublishPorts, publish_images
from tests.fakes import (
    OCI_MANIFEST,
    Events,
    FakeEngine,
    FakeRegistry,
    FakeSbom,
    FakeSigner,
    image_id,
    passing,
    store,
)
from tests.unit.publish.test_publish_run import settings

ROOT = Path(__file__).resolve().parents[3]
AMD64, ARM64 = "linux/amd64", "linux/arm64"
CUDA_FACTS = {"torch": "2.14.1+cu130", "cuda": "13.0", "python": "3.11.2", "cudnn": "9.13.0"}
CPU_FACTS = {"torch": "2.13.0+cpu", "cuda": None, "python": "3.11.2"}


@pytest.fixture(scope="module")
def cuda() -> Matrix:
    return load_matrix(ROOT / "examples" / "cuda-local.yaml")


@pytest.fixture(scope="module")
def cpu() -> Matrix:
    return load_matrix(ROOT / "examples" / "cpu.yaml")


def plan_of(matrix: Matrix, flavour: str, platform: str = AMD64) -> ImagePlan:
    return next(p for p in matrix.plans if p.flavour == flavour and p.platform == platform)


def verified(image: str, plan: ImagePlan, facts: dict[str, Any] | None = None) -> Evidence:
    """A passing verify record of `image` (every required probe passed; the env probe saw
    `facts`, by default those the CUDA example's tags name)."""
    probes = [passing("env", CUDA_FACTS if facts is None else facts)]
    probes += [passing(name) for name in plan.required_probes[1:]]
    record = VerifyRecord(
        image_id=image,
        reference=plan.reference,
        labels={},
        platform=plan.platform,
        device="cpu",
        status="pass",
        probes=tuple(probes),
        timings=Timings(
            container_start_s=0, probe_wall_s=1, verify_wall_s=1, timeout_s=60, timed_out=False
        ),
    )
    return Evidence("20261130T000000Z-aaaa", plan.name, record)


class World:
    """The CUDA example's images on a fake engine, each platform's with its own id, and a
    registry to publish them to."""

    def __init__(self, tmp_path: Path, matrix: Matrix) -> None:
        self.matrix = matrix
        self.engine = FakeEngine(outputs={"python3": '[{"name": "torch", "version": "2.14.1"}]'})
        self.ids = {p.name: self.engine.add(p.reference, image_id(p.name)).id for p in matrix.plans}
        self.registry = FakeRegistry(self.engine)
        self.store = store(tmp_path)
        self.events = Events()
        self.signer = FakeSigner()
        self.repository = matrix.plans[0].repository

    def plans(self, flavour: str | None = None) -> list[ImagePlan]:
        return [p for p in self.matrix.plans if flavour in (None, p.flavour)]

    def evidence(
        self, flavour: str | None = "slim", platforms: Sequence[str] = (AMD64, ARM64)
    ) -> list[Evidence]:
        """A passing record of each image of `flavour` (None: both) built for `platforms`."""
        return [
            verified(self.ids[p.name], p) for p in self.plans(flavour) if p.platform in platforms
        ]

    def publish(
        self,
        evidence: Sequence[Evidence],
        flavour: str | None = "slim",
        *,
        platforms: Sequence[str] = (AMD64, ARM64),
        signed: bool = False,
        engine: bool = True,
        **options: Any,
    ) -> list[PublishRecord]:
        """Publish the images of `flavour` (None: both) built for `platforms`, grouped as the
        CLI groups them (a partial selection only for candidates)."""
        selected = [p for p in self.plans(flavour) if p.platform in platforms]
        chosen = settings(**options)
        groups = image_groups(selected, self.matrix.plans, partial=chosen.mode.partial)
        ports = PublishPorts(
            self.registry,
            self.store,
            evidence,
            self.events,
            FakeSbom(),
            signer=self.signer if signed else None,
        )
        return list(publish_images(chosen, groups, ports, self.engine if engine else None).records)

    def ref(self, tag: str) -> str:
        return f"{self.repository}:{tag}"

    def platform_manifest(self, platform: str, reference: str) -> PlatformManifest:
        """The index entry of the manifest the registry holds under `reference`."""
        document = self.registry.document(reference)
        assert document is not None, reference
        return PlatformManifest(platform, document.digest, len(document.body), document.media_type)

    def expected_index(self, records: Sequence[PublishRecord]) -> ManifestDocument:
        """The index of the two platforms' pushed manifests (`records`: amd64's, arm64's)."""
        digests = [r.tags[0].digest for r in records]
        return index_document(
            [
                self.platform_manifest(platform, f"{self.repository}@{digest}")
                for platform, digest in zip((AMD64, ARM64), digests, strict=True)
            ]
        )


def manifest(platform: str, text: str, media_type: str = DOCKER_MANIFEST) -> PlatformManifest:
    return PlatformManifest(platform, image_id(text), 1000 + len(text), media_type)


# image_groups and platform_tag ---------------------------------------------------------------


def test_groups_hold_every_platform_of_an_image_in_the_order_first_selected(
    cuda: Matrix,
) -> None:
    amd_slim, amd_full = plan_of(cuda, "slim"), plan_of(cuda, "full")
    arm_slim, arm_full = plan_of(cuda, "slim", ARM64), plan_of(cuda, "full", ARM64)
    selected = [arm_full, arm_slim, amd_slim, amd_full]
    groups = image_groups(selected, cuda.plans)
    assert groups == [ImageGroup((arm_full, amd_full), 2), ImageGroup((arm_slim, amd_slim), 2)]
    assert [{p.tag for p in g.plans} for g in groups] == [{amd_full.tag}, {amd_slim.tag}]
    assert all(g.multi for g in groups)
    assert image_groups(cuda.plans, cuda.plans) == [
        ImageGroup((amd_slim, arm_slim), 2),
        ImageGroup((amd_full, arm_full), 2),
    ]


@pytest.mark.parametrize(("chosen", "missing"), [(AMD64, ARM64), (ARM64, AMD64)])
def test_one_platform_of_a_two_platform_image_cannot_be_published_alone(
    cuda: Matrix, chosen: str, missing: str
) -> None:
    slim = plan_of(cuda, "slim", chosen)
    with pytest.raises(InputError) as raised:
        image_groups([slim], cuda.plans)
    message = raised.value.message
    assert message.startswith(f"{slim.tag} is one index of linux/amd64, linux/arm64")
    assert message.endswith(f"publishing it needs {missing} too")
    assert "--candidate" in raised.value.hint and "--from-candidate" in raised.value.hint


@pytest.mark.parametrize("chosen", [AMD64, ARM64])
def test_a_partial_selection_is_one_platform_of_a_multi_platform_image_for_candidates(
    cuda: Matrix, chosen: str
) -> None:
    # CI candidates: each platform's job pushes its own, so one platform alone is allowed.
    slim = plan_of(cuda, "slim", chosen)
    groups = image_groups([slim], cuda.plans, partial=True)
    assert groups == [ImageGroup((slim,), 2)]
    assert groups[0].multi  # still an index's platform: it goes under its platform tag
    every = image_groups(cuda.plans, cuda.plans, partial=True)
    assert every == image_groups(cuda.plans, cuda.plans)


def test_a_single_platform_matrix_gives_groups_of_one(cpu: Matrix) -> None:
    groups = image_groups(cpu.plans, cpu.plans)
    assert groups == [ImageGroup((p,), 1) for p in cpu.plans]
    assert not any(g.multi for g in groups)
    assert image_groups([cpu.plans[1]], cpu.plans) == [ImageGroup((cpu.plans[1],), 1)]


@pytest.mark.parametrize(("platform", "suffix"), [(AMD64, "-amd64"), (ARM64, "-arm64")])
def test_a_platform_tag_is_the_tag_plus_the_architecture(platform: str, suffix: str) -> None:
    tag = "2.14.1-cuda13.0-cudnn9-py3.11-slim"
    assert platform_tag(tag, platform) == tag + suffix


# index_document ------------------------------------------------------------------------------


def test_the_index_is_canonical_so_the_same_manifests_in_any_order_make_one_digest() -> None:
    amd, arm = manifest(AMD64, "amd"), manifest(ARM64, "arm")
    one, other = index_document([amd, arm]), index_document([arm, amd])
    assert one.body == other.body and one.digest == other.digest
    assert one.digest == "sha256:" + hashlib.sha256(one.body).hexdigest()
    parsed = json.loads(one.body)
    assert one.body == json.dumps(parsed, sort_keys=True, separators=(",", ":")).encode()
    assert index_document([amd, manifest(ARM64, "arm, rebuilt")]).digest != one.digest


def test_index_entries_are_sorted_by_platform_and_arm64_carries_variant_v8() -> None:
    amd, arm = manifest(AMD64, "amd"), manifest(ARM64, "arm")
    index = index_document([arm, amd])
    entries = json.loads(index.body)["manifests"]
    assert entries == [
        {
            "digest": amd.digest,
            "mediaType": DOCKER_MANIFEST,
            "platform": {"architecture": "amd64", "os": "linux"},
            "size": amd.size,
        },
        {
            "digest": arm.digest,
            "mediaType": DOCKER_MANIFEST,
            "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"},
            "size": arm.size,
        },
    ]
    assert index.children == ((amd.digest, "linux/amd64"), (arm.digest, "linux/arm64/v8"))
    assert index.is_index and index.config == ""
    assert [d for d, _ in index.images()] == [amd.digest, arm.digest]


@pytest.mark.parametrize(
    ("types", "expected"),
    [
        ((DOCKER_MANIFEST, DOCKER_MANIFEST), DOCKER_LIST),
        ((DOCKER_MANIFEST, OCI_MANIFEST), OCI_INDEX),
        ((OCI_MANIFEST, OCI_MANIFEST), OCI_INDEX),
    ],
)
def test_a_docker_manifest_list_only_when_every_entry_is_a_docker_v2_manifest(
    types: tuple[str, str], expected: str
) -> None:
    index = index_document([manifest(AMD64, "amd", types[0]), manifest(ARM64, "arm", types[1])])
    assert index.media_type == expected
    body = json.loads(index.body)
    assert body["mediaType"] == expected and body["schemaVersion"] == 2
    assert [e["mediaType"] for e in body["manifests"]] == list(types)


# publish_images over two platforms --------------------------------------------------------------


def test_each_platform_goes_under_its_platform_tag_and_one_index_under_every_tag(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    amd, arm = plan_of(cuda, "slim"), plan_of(cuda, "slim", ARM64)
    records = world.publish(world.evidence())
    assert [r.name for r in records] == [amd.name, arm.name, f"{amd.cell.shared_id}-slim-index"]
    assert [r.status for r in records] == [PublishStatus.PUBLISHED] * 3, records
    # Platforms: only their platform tag, each gated on (and holding) its own image.
    assert world.registry.pushed == [world.ref(f"{amd.tag}-amd64"), world.ref(f"{amd.tag}-arm64")]
    assert [[t.tag for t in r.tags] for r in records[:2]] == [
        [world.ref(f"{amd.tag}-amd64")],
        [world.ref(f"{amd.tag}-arm64")],
    ]
    assert [r.image_id for r in records[:2]] == [world.ids[amd.name], world.ids[arm.name]]
    # The index: put (never pushed) under the versioned tag and every alias.
    index = records[2]
    final = [world.ref(t) for t in (amd.tag, *amd.aliases)]
    assert world.registry.put_tags == final
    assert [(t.tag, t.kind, t.status) for t in index.tags] == [
        (final[0], "versioned", PublishStatus.PUBLISHED),
        *((a, "alias", PublishStatus.PUBLISHED) for a in final[1:]),
    ]
    put = world.registry.documents[final[0]]
    assert index.image_id == put.digest and {t.digest for t in index.tags} == {put.digest}
    assert all(world.registry.documents[t] == put for t in final)
    assert put == world.expected_index(records[:2])


def test_the_index_names_the_two_platform_manifests_by_their_pushed_digests(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    records = world.publish(world.evidence())
    amd_digest, arm_digest = (r.tags[0].digest for r in records[:2])
    assert amd_digest is not None and arm_digest is not None and amd_digest != arm_digest
    put = world.registry.documents[world.ref(plan_of(cuda, "slim").tag)]
    assert put.children == ((amd_digest, "linux/amd64"), (arm_digest, "linux/arm64/v8"))
    entries = json.loads(put.body)["manifests"]
    assert [(e["digest"], e["mediaType"]) for e in entries] == [
        (amd_digest, OCI_MANIFEST),
        (arm_digest, OCI_MANIFEST),
    ]
    assert put.media_type == OCI_INDEX  # the fake pushes OCI manifests
    written = json.loads((world.store.root / "publish.json").read_text())
    assert [r["status"] for r in written] == ["published"] * 3
    assert written[2]["image_id"] == put.digest


def test_platforms_pushed_as_docker_v2_manifests_make_a_docker_manifest_list(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    world.registry.pushed_media_type = DOCKER_MANIFEST
    records = world.publish(world.evidence())
    assert records[2].status is PublishStatus.PUBLISHED, records[2].reasons
    put = world.registry.documents[world.ref(plan_of(cuda, "slim").tag)]
    assert put.media_type == DOCKER_LIST
    assert json.loads(put.body)["mediaType"] == DOCKER_LIST


def test_both_flavours_each_publish_their_platforms_then_their_index(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    records = world.publish(world.evidence(None), None)
    slim, full = plan_of(cuda, "slim"), plan_of(cuda, "full")
    assert [r.name for r in records] == [
        slim.name,
        plan_of(cuda, "slim", ARM64).name,
        f"{slim.cell.shared_id}-slim-index",
        full.name,
        plan_of(cuda, "full", ARM64).name,
        f"{full.cell.shared_id}-full-index",
    ]
    assert {r.status for r in records} == {PublishStatus.PUBLISHED}
    latest = world.registry.documents[world.ref("latest")]
    assert latest.digest == records[5].image_id != records[2].image_id
    assert world.registry.documents[world.ref("latest-slim")].digest == records[2].image_id


def test_the_index_record_is_named_for_the_image_not_its_amd64_platform_whichever_comes_first(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    amd, arm = plan_of(cuda, "slim"), plan_of(cuda, "slim", ARM64)
    ports = PublishPorts(world.registry, world.store, world.evidence(), world.events, FakeSbom())
    records = publish_images(settings(), [ImageGroup((arm, amd), 2)], ports, world.engine).records
    assert [r.name for r in records] == [arm.name, amd.name, "2.14.1-cu130-py3.11-slim-index"]
    assert amd.name == "2.14.1-cu130-py3.11-slim"  # the index's record is not amd64's
    assert records[2].status is PublishStatus.PUBLISHED, records[2].reasons
    put = world.registry.documents[world.ref(amd.tag)]
    assert [p for _, p in put.children] == ["linux/amd64", "linux/arm64/v8"]


def test_publishing_again_leaves_every_tag_unchanged_with_the_same_digest(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    first = world.publish(world.evidence())
    pushed, put = list(world.registry.pushed), list(world.registry.put_tags)
    again = world.publish(world.evidence())
    assert [r.status for r in again] == [PublishStatus.UNCHANGED] * 3, again
    assert world.registry.pushed == pushed and world.registry.put_tags == put
    assert [r.tags[0].digest for r in again[:2]] == [r.tags[0].digest for r in first[:2]]
    assert {t.status for r in again for t in r.tags} == {PublishStatus.UNCHANGED}
    assert again[2].image_id == first[2].image_id
    assert [t.tag for t in again[2].tags] == [t.tag for t in first[2].tags]
    # An unchanged index tag names the digest it holds, as an unchanged platform tag does.
    assert [t.digest for t in again[2].tags] == [first[2].image_id] * len(first[2].tags)


def test_an_alias_gone_since_the_last_publish_is_put_again_beside_the_unchanged_tags(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    slim = plan_of(cuda, "slim")
    first = world.publish(world.evidence())
    gone = world.ref(slim.aliases[-1])
    del world.registry.tags[gone], world.registry.documents[gone]
    again = world.publish(world.evidence())
    index = again[2]
    assert index.status is PublishStatus.PUBLISHED and index.image_id == first[2].image_id
    assert [(t.tag, t.status, t.digest) for t in index.tags] == [
        (world.ref(t), PublishStatus.UNCHANGED, index.image_id)
        for t in (slim.tag, *slim.aliases[:-1])
    ] + [(gone, PublishStatus.PUBLISHED, index.image_id)]
    assert world.registry.put_tags[len(first[2].tags) :] == [gone]


def test_each_platform_is_gated_on_its_own_record_and_the_index_waits_for_all(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    arm = plan_of(cuda, "slim", ARM64)
    # The amd64 image's record does not let the arm64 image (another id) through.
    records = world.publish(world.evidence(platforms=(AMD64,)))
    assert [r.status for r in records] == [
        PublishStatus.PUBLISHED,
        PublishStatus.REFUSED,
        PublishStatus.REFUSED,
    ]
    assert (
        records[1].reasons[0].startswith(f"no verify results for image {world.ids[arm.name][:19]}")
    )
    assert world.registry.pushed == [world.ref(f"{arm.tag}-amd64")]
    assert world.registry.put_tags == []
    assert world.ref(arm.tag) not in world.registry.tags
    assert records[2].reasons == (f"the index needs every platform; not published: {arm.name}",)
    assert records[2].tags == () and records[2].image_id is None
    finished = [e for e in world.events.seen if e.kind == "finished"]
    assert [e.status for e in finished] == ["published", "refused", "refused"]


def test_a_record_of_the_wrong_versions_refuses_that_platform_and_so_the_index(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    amd, arm = plan_of(cuda, "slim"), plan_of(cuda, "slim", ARM64)
    wrong = verified(world.ids[arm.name], arm, {**CUDA_FACTS, "cuda": "12.8"})
    records = world.publish([verified(world.ids[amd.name], amd), wrong])
    assert records[1].status is PublishStatus.REFUSED
    assert "tag says CUDA 13.0, the image has 12.8" in records[1].reasons
    assert records[2].status is PublishStatus.REFUSED and arm.name in records[2].reasons[0]
    assert world.registry.put_tags == []


def test_a_platform_tag_holding_other_content_is_never_overwritten(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    arm = plan_of(cuda, "slim", ARM64)
    taken = world.ref(f"{arm.tag}-arm64")
    world.registry.tags[taken] = RemoteManifest(image_id("m"), image_id("another arm64 image"))
    records = world.publish(world.evidence())
    assert records[1].status is PublishStatus.REFUSED
    assert "versioned tags are never overwritten" in records[1].reasons[-1]
    assert taken not in world.registry.pushed
    assert records[2].status is PublishStatus.REFUSED and world.registry.put_tags == []


def test_a_versioned_tag_holding_another_document_refuses_the_index(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    versioned = world.ref(plan_of(cuda, "slim").tag)
    other = RemoteManifest(image_id("old index"), "")
    world.registry.tags[versioned] = other
    records = world.publish(world.evidence())
    index = records[2]
    assert index.status is PublishStatus.REFUSED and index.tags == ()
    assert index.image_id is None
    digest = world.expected_index(records[:2]).digest
    assert index.reasons == (
        f"{versioned} already exists with other content; versioned tags are never "
        f"overwritten (this index is {digest})",
    )
    assert world.registry.put_tags == []  # neither the versioned tag nor any alias
    assert world.registry.tags[versioned] == other


def test_an_alias_holding_another_document_is_moved_to_the_index(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    slim = plan_of(cuda, "slim")
    alias = world.ref(slim.aliases[0])
    world.registry.tags[alias] = RemoteManifest(image_id("last month's index"), "")
    records = world.publish(world.evidence())
    index = records[2]
    assert index.status is PublishStatus.PUBLISHED
    moved = next(t for t in index.tags if t.tag == alias)
    assert moved.status is PublishStatus.PUBLISHED
    assert moved.moved_from == image_id("last month's index")
    assert moved.digest == index.image_id == world.registry.tags[alias].digest
    assert [t.moved_from for t in index.tags if t.tag != alias] == [None] * (len(index.tags) - 1)


def test_a_dry_run_pushes_and_puts_nothing_and_lists_the_index_tags(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    slim = plan_of(cuda, "slim")
    records = world.publish(world.evidence(), dry_run=True)
    assert [r.status for r in records] == [PublishStatus.DRY_RUN] * 3
    assert world.registry.pushed == [] and world.registry.put_tags == []
    assert world.engine.tagged == []
    assert [t.tag for t in records[0].tags] == [world.ref(f"{slim.tag}-amd64")]
    assert [(t.tag, t.status) for t in records[2].tags] == [
        (world.ref(t), PublishStatus.DRY_RUN) for t in (slim.tag, *slim.aliases)
    ]
    assert records[2].image_id is None


def test_with_a_signer_the_index_is_signed_and_carries_each_platforms_record(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    amd, arm = plan_of(cuda, "slim"), plan_of(cuda, "slim", ARM64)
    records = world.publish(world.evidence(), signed=True)
    assert [r.status for r in records] == [PublishStatus.PUBLISHED] * 3, records
    digests = [r.tags[0].digest for r in records[:2]] + [records[2].image_id]
    assert world.signer.signed == [f"{world.repository}@{d}" for d in digests]
    # Each platform as a single image: its record and its SBOM.
    assert [r.attestations for r in records[:2]] == [(VERIFY_PREDICATE, SBOM_PREDICATE)] * 2
    index = records[2]
    assert index.signed_digest == index.image_id
    assert index.attestations == (VERIFY_PREDICATE, VERIFY_PREDICATE)
    on_index = [
        VerifyPredicate.model_validate(p)
        for r, t, p in world.signer.attestations
        if r == f"{world.repository}@{index.image_id}"
    ]
    assert [(p.platform, p.image.image_id) for p in on_index] == [
        (AMD64, world.ids[amd.name]),
        (ARM64, world.ids[arm.name]),
    ]
    assert {p.image.digest for p in on_index} == {index.image_id}


def test_a_refused_platform_leaves_the_index_unsigned(tmp_path: Path, cuda: Matrix) -> None:
    world = World(tmp_path, cuda)
    records = world.publish(world.evidence(platforms=(AMD64,)), signed=True)
    assert records[2].status is PublishStatus.REFUSED and records[2].signed_digest is None
    assert world.signer.signed == [f"{world.repository}@{records[0].tags[0].digest}"]


def test_an_engine_that_pushes_its_own_index_gives_the_index_that_platforms_manifest(
    tmp_path: Path, cuda: Matrix
) -> None:
    # The containerd store pushes an index (the image and an attestation manifest); the
    # image's tag then holds the engine's index, and the published index names its child.
    world = World(tmp_path, cuda)
    world.registry.containerd_store = True
    children: dict[str, str] = {}
    for plan in (plan_of(cuda, "slim"), plan_of(cuda, "slim", ARM64)):
        arch = plan.platform.split("/")[1]
        child = ManifestDocument(OCI_MANIFEST, b"{}", image_id(f"{arch} manifest"), "cfg")
        world.registry.documents[f"{world.repository}@{child.digest}"] = child
        engine_index = ManifestDocument(
            OCI_INDEX,
            b"{}",
            world.ids[plan.name],
            children=((child.digest, plan.platform), (image_id("att"), "unknown/unknown")),
        )
        world.registry.documents[f"{world.repository}@{engine_index.digest}"] = engine_index
        children[plan.platform] = child.digest
    records = world.publish(world.evidence())
    assert records[2].status is PublishStatus.PUBLISHED, records[2].reasons
    put = world.registry.documents[world.ref(plan_of(cuda, "slim").tag)]
    assert put.children == (
        (children[AMD64], "linux/amd64"),
        (children[ARM64], "linux/arm64/v8"),
    )


def test_a_platform_manifest_the_registry_cannot_show_fails_the_index(
    tmp_path: Path, cuda: Matrix
) -> None:
    # A registry that lost the amd64 manifest just pushed: its tag still answers, its digest
    # does not.
    world = World(tmp_path, cuda)
    amd = plan_of(cuda, "slim")
    pushed_at = world.ref(f"{amd.tag}-amd64")
    showing = world.registry.document

    def document(reference: str) -> ManifestDocument | None:
        held = world.registry.tags.get(pushed_at)
        if held is not None and reference == f"{world.repository}@{held.digest}":
            return None
        return showing(reference)

    world.registry.document = document  # type: ignore[method-assign]
    records = world.publish(world.evidence())
    assert [r.status for r in records[:2]] == [PublishStatus.PUBLISHED] * 2
    digest = records[0].tags[0].digest
    assert records[2].status is PublishStatus.FAILED
    assert records[2].reasons == (
        f"{world.repository}@{digest} (linux/amd64) is not on the registry after its push; "
        "publish again; if it persists, check the registry's storage",
    )
    assert world.registry.put_tags == []


def test_the_fake_registry_shows_what_a_tag_holds_by_its_digest_too(
    tmp_path: Path, cuda: Matrix
) -> None:
    # As a registry does (`Registry.document`): a pushed manifest and a put index alike.
    world = World(tmp_path, cuda)
    records = world.publish(world.evidence())
    for record in records:
        digest = record.tags[0].digest
        by_digest = world.registry.document(f"{world.repository}@{digest}")
        by_tag = world.registry.document(record.tags[0].tag)
        assert by_digest is not None and by_digest == by_tag and by_digest.digest == digest
    assert world.registry.document(f"{world.repository}@{image_id('nothing')}") is None
    assert world.registry.document(f"another/repository@{records[0].tags[0].digest}") is None


def test_a_registry_failing_a_put_fails_the_index_and_keeps_the_tags_already_put(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    slim = plan_of(cuda, "slim")
    refusing = world.ref(slim.aliases[0])
    putting = world.registry.put

    def put(reference: str, document: ManifestDocument) -> str:
        if reference == refusing:
            raise RegistryError(f"registry answered 500 for putting {reference}", "try again")
        return putting(reference, document)

    world.registry.put = put  # type: ignore[method-assign]
    records = world.publish(world.evidence())
    index = records[2]
    assert index.status is PublishStatus.FAILED
    assert index.reasons == (f"registry answered 500 for putting {refusing}; try again",)
    assert world.registry.put_tags == [world.ref(slim.tag)]
    # The versioned tag did get the index: the record says so, with its digest.
    digest = world.expected_index(records[:2]).digest
    assert index.tags == (
        TagRecord(
            tag=world.ref(slim.tag),
            kind="versioned",
            status=PublishStatus.PUBLISHED,
            digest=digest,
        ),
    )
    written = json.loads((world.store.root / "publish.json").read_text())
    assert written[2]["status"] == "failed"
    assert [t["tag"] for t in written[2]["tags"]] == [world.ref(slim.tag)]


def test_a_registry_that_rewrites_the_put_index_fails_it(tmp_path: Path, cuda: Matrix) -> None:
    world = World(tmp_path, cuda)
    slim = plan_of(cuda, "slim")
    putting = world.registry.put
    rewritten = image_id("the index, rewritten by the registry")

    def put(reference: str, document: ManifestDocument) -> str:
        putting(reference, document)
        return rewritten

    world.registry.put = put  # type: ignore[method-assign]
    records = world.publish(world.evidence())
    index = records[2]
    digest = world.expected_index(records[:2]).digest
    versioned = world.ref(slim.tag)
    assert index.status is PublishStatus.FAILED and index.tags == ()
    assert index.reasons == (
        f"{versioned} holds {rewritten} after the put, not the index's {digest}; the registry "
        "rewrote the index; publish through a registry that keeps it",
    )
    assert index.image_id is None and index.signed_digest is None
    assert world.registry.put_tags == [versioned]  # no alias after it


# --candidate and --from-candidate over two platforms -----------------------------------------


def test_a_candidate_run_pushes_each_platform_under_its_candidate_platform_tag_only(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    amd, arm = plan_of(cuda, "slim"), plan_of(cuda, "slim", ARM64)
    records = world.publish(world.evidence(), candidate="42")
    candidate = candidate_tag(amd.tag, "42")
    assert candidate == f"{amd.tag}-candidate-42"
    platform_tags = [world.ref(f"{candidate}-amd64"), world.ref(f"{candidate}-arm64")]
    # One record per platform, no index record: the index is assembled at promotion.
    assert [(r.name, r.status) for r in records] == [
        (amd.name, PublishStatus.PUBLISHED),
        (arm.name, PublishStatus.PUBLISHED),
    ]
    assert world.registry.pushed == platform_tags
    assert [[(t.tag, t.kind) for t in r.tags] for r in records] == [
        [(platform_tags[0], "candidate")],
        [(platform_tags[1], "candidate")],
    ]
    assert [r.image_id for r in records] == [world.ids[amd.name], world.ids[arm.name]]
    assert world.registry.put_tags == [] and world.registry.documents == {}
    assert set(world.registry.tags) == set(platform_tags)  # no candidate, versioned or alias


@pytest.mark.parametrize(("platform", "arch"), [(AMD64, "amd64"), (ARM64, "arm64")])
def test_a_candidate_run_of_one_platform_pushes_that_platform_alone(
    tmp_path: Path, cuda: Matrix, platform: str, arch: str
) -> None:
    # Each platform's CI job (its own runner) pushes its own candidate.
    world = World(tmp_path, cuda)
    plan = plan_of(cuda, "slim", platform)
    records = world.publish(
        world.evidence(platforms=(platform,)), platforms=(platform,), candidate="42"
    )
    assert [(r.name, r.status) for r in records] == [(plan.name, PublishStatus.PUBLISHED)]
    assert world.registry.pushed == [world.ref(f"{candidate_tag(plan.tag, '42')}-{arch}")]
    assert world.registry.put_tags == []
    # Without --candidate, one platform of the image cannot be published alone.
    with pytest.raises(InputError):
        world.publish(world.evidence(platforms=(platform,)), platforms=(platform,))


def test_promotion_joins_the_platform_candidates_in_one_index_and_promotes_it_whole(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    amd, arm = plan_of(cuda, "slim"), plan_of(cuda, "slim", ARM64)
    # Each platform's job pushes its own candidate; the promotion needs no engine.
    for platform in (AMD64, ARM64):
        world.publish(world.evidence(platforms=(platform,)), platforms=(platform,), candidate="42")
    candidate = candidate_tag(amd.tag, "42")
    amd_digest = world.registry.tags[world.ref(f"{candidate}-amd64")].digest
    arm_digest = world.registry.tags[world.ref(f"{candidate}-arm64")].digest
    promoted = world.publish(world.evidence(), from_candidate="42", engine=False, signed=True)
    assert [r.status for r in promoted] == [PublishStatus.PUBLISHED], promoted
    record = promoted[0]
    # The index, at the candidate tag: the two platforms' candidates by their digests.
    index = world.registry.documents[world.ref(candidate)]
    assert index.children == ((amd_digest, "linux/amd64"), (arm_digest, "linux/arm64/v8"))
    assert index == index_document(
        [
            world.platform_manifest(AMD64, world.ref(f"{candidate}-amd64")),
            world.platform_manifest(ARM64, world.ref(f"{candidate}-arm64")),
        ]
    )
    # Then its very bytes under the versioned tag and every alias.
    final = [world.ref(t) for t in (amd.tag, *amd.aliases)]
    assert world.registry.put_tags == [world.ref(candidate), *final]
    assert all(world.registry.documents[t].body == index.body for t in final)
    assert [(t.tag, t.kind, t.status, t.digest) for t in record.tags] == [
        (final[0], "versioned", PublishStatus.PUBLISHED, index.digest),
        *((a, "alias", PublishStatus.PUBLISHED, index.digest) for a in final[1:]),
    ]
    assert world.registry.pushed == [
        world.ref(f"{candidate}-amd64"),
        world.ref(f"{candidate}-arm64"),
    ]
    # Each platform was gated on its own record: the index carries both, by their own ids.
    assert world.signer.signed == [f"{world.repository}@{index.digest}"]
    assert record.signed_digest == index.digest
    on_index = [
        VerifyPredicate.model_validate(p)
        for r, _, p in world.signer.attestations
        if r == f"{world.repository}@{index.digest}"
    ]
    assert [(p.platform, p.image.image_id) for p in on_index] == [
        (AMD64, world.ids[amd.name]),
        (ARM64, world.ids[arm.name]),
    ]
    # Promoting again: the candidate tag already holds the index, every tag unchanged.
    again = world.publish(world.evidence(), from_candidate="42", engine=False)
    assert [r.status for r in again] == [PublishStatus.UNCHANGED], again
    assert world.registry.put_tags == [world.ref(candidate), *final]
    assert {(t.status, t.digest) for t in again[0].tags} == {
        (PublishStatus.UNCHANGED, index.digest)
    }


@pytest.mark.parametrize(("pushed", "absent"), [(AMD64, "arm64"), (ARM64, "amd64")])
def test_promotion_fails_the_image_when_a_platform_candidate_is_missing(
    tmp_path: Path, cuda: Matrix, pushed: str, absent: str
) -> None:
    world = World(tmp_path, cuda)
    slim = plan_of(cuda, "slim")
    world.publish(world.evidence(platforms=(pushed,)), platforms=(pushed,), candidate="42")
    records = world.publish(world.evidence(), from_candidate="42", engine=False)
    missing = world.ref(f"{candidate_tag(slim.tag, '42')}-{absent}")
    assert [(r.name, r.status) for r in records] == [(slim.name, PublishStatus.FAILED)]
    assert records[0].reasons == (
        f"no candidate {missing}; its platform's job pushes it with --candidate",
    )
    assert records[0].tags == ()
    assert world.registry.put_tags == []  # no index, at the candidate tag or elsewhere
    assert world.ref(slim.tag) not in world.registry.tags
    written = json.loads((world.store.root / "publish.json").read_text())
    assert [r["status"] for r in written] == ["failed"]


def test_promotion_fails_the_image_when_the_registry_cannot_be_asked(
    tmp_path: Path, cuda: Matrix
) -> None:
    world = World(tmp_path, cuda)
    slim = plan_of(cuda, "slim")
    world.publish(world.evidence(), candidate="42")
    world.registry.unreachable = True
    records = world.publish(world.evidence(), from_candidate="42", engine=False)
    source = world.ref(f"{candidate_tag(slim.tag, '42')}-amd64")
    assert [r.status for r in records] == [PublishStatus.FAILED]
    assert records[0].reasons == (f"cannot reach the registry of {source}: connection refused",)
    assert world.registry.put_tags == []


@pytest.mark.parametrize(("verified_on", "refused"), [(AMD64, ARM64), (ARM64, AMD64)])
def test_promotion_refuses_the_index_when_one_platform_is_unverified(
    tmp_path: Path, cuda: Matrix, verified_on: str, refused: str
) -> None:
    world = World(tmp_path, cuda)
    slim = plan_of(cuda, "slim")
    unverified = plan_of(cuda, "slim", refused)
    world.publish(world.evidence(), candidate="42")
    candidate = world.ref(candidate_tag(slim.tag, "42"))
    # The other platform's record (another image id) does not let this one through.
    records = world.publish(
        world.evidence(platforms=(verified_on,)), from_candidate="42", engine=False, signed=True
    )
    assert [r.status for r in records] == [PublishStatus.REFUSED]
    name = "linux/arm64/v8" if refused == ARM64 else "linux/amd64"
    assert records[0].reasons == (
        f"{name}: no verify results for image {world.ids[unverified.name][:19]} "
        "(1 results belong to other image ids)",
        f"{name}: {remedy([Problem.NO_RECORD])}",
    )
    assert records[0].tags == () and records[0].signed_digest is None
    # The index was assembled at the candidate tag; nothing went under the final tags.
    assert world.registry.put_tags == [candidate]
    assert world.ref(slim.tag) not in world.registry.tags
    assert not any(world.ref(a) in world.registry.tags for a in slim.aliases)
    assert world.signer.signed == []


# One platform: as before --------------------------------------------------------------------


def test_a_single_platform_image_is_pushed_under_its_tags_with_no_index(
    tmp_path: Path, cpu: Matrix
) -> None:
    world = World(tmp_path, cpu)
    slim = plan_of(cpu, "slim")
    records = world.publish([verified(world.ids[slim.name], slim, CPU_FACTS)])
    assert [(r.name, r.status) for r in records] == [(slim.name, PublishStatus.PUBLISHED)]
    final = [world.ref(t) for t in (slim.tag, *slim.aliases)]
    assert world.registry.pushed == final and world.registry.put_tags == []
    assert [(t.tag, t.kind) for t in records[0].tags] == [
        (final[0], "versioned"),
        *((a, "alias") for a in final[1:]),
    ]
    assert not any(t.endswith(("-amd64", "-arm64")) for t in world.registry.tags)
