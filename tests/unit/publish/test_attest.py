"""Signed evidence over the fakes: record seals and the gate, the verify predicate and its
schema, what `attest verify` accepts, the whole-image SBOM, and signing in publish/promotion."""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
from hashlib import sha256
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from imagekit.adapters import cosign as cosign_adapter
from imagekit.adapters.cosign import Cosign, loopback
from imagekit.adapters.results import RunFolder, verify_evidence
from imagekit.adapters.sbom import CycloneDx, problems
from imagekit.audit.attestation import AUDIT_PREDICATE
from imagekit.audit.debian import Offered
from imagekit.audit.ports import AuditPorts, AuditWith
from imagekit.audit.settings import AuditSettings
from imagekit.kernel import labels as L
from imagekit.kernel.integrity import seal, seal_problem
from imagekit.kernel.labels import ImageLabels
from imagekit.kernel.publish_records import BuildEvidence, Evidence, PublishStatus
from imagekit.kernel.records import BuildRecord, BuildStatus, ImageRecord, Material, Status
from imagekit.kernel.vocabulary import Threshold
from imagekit.matrix.load import load_matrix
from imagekit.matrix.plan import ImagePlan
from imagekit.publish.attest import (
    SBOM_PREDICATE,
    VERIFY_PREDICATE,
    Requirement,
    VerifyPredicate,
    judge,
    predicate,
    predicate_schema,
    predicate_schema_text,
)
from imagekit.publish.attest_verify import attested_level, check_attestations
from imagekit.publish.gate import decide
from imagekit.publish.inventory import cuda_stack, distro, inventory, os_packages
from imagekit.publish.multiarch import ImageGroup
from imagekit.publish.ports import ManifestDocument
from imagekit.publish.provenance import PROVENANCE_PREDICATE
from imagekit.publish.requests import AttestVerifyRequest
from imagekit.publish.run import PublishPorts, candidate_tag, publish_images
from tests.fakes import (
    OCI_MANIFEST,
    Events,
    FakeAttestationReader,
    FakeContents,
    FakeEngine,
    FakeIndexes,
    FakeRegistry,
    FakeSbom,
    FakeSigner,
    image_id,
    passing,
    store,
)
from tests.unit.publish.test_publish_run import CPU_FACTS, settings, verified

ROOT = Path(__file__).resolve().parents[3]
SCHEMA_FILE = ROOT / "imagekit" / "data" / "verify-predicate.schema.json"
DIGEST = "sha256:" + "d" * 64
NOW = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)
SSL_FIX = Offered("libssl3", "3.0.22-1~deb12u2", "amd64", "openssl")


@pytest.fixture
def slim() -> ImagePlan:
    return next(p for p in load_matrix(ROOT / "examples" / "cpu.yaml").plans if p.flavour == "slim")


def _on_disk(tmp_path: Path, plan: ImagePlan, image: str, key: bytes | None = None) -> Path:
    """A verify run under tmp_path/results that recorded a passing `image`; its record file."""
    run = RunFolder.create(tmp_path / "results", "20261130T000000Z-aaaa", seal_key=key)
    run.update_image(plan.name, ImageRecord(verify=verified(image, plan).record))
    return run.image_file(plan.name)


# The seal --------------------------------------------------------------------------------------


def test_a_sealed_record_holds_and_any_edit_breaks_it(tmp_path: Path, slim: ImagePlan) -> None:
    path = _on_disk(tmp_path, slim, image_id("slim"))
    data = json.loads(path.read_text())
    assert seal_problem(data["verify"], data["seal"]) == ""
    data["verify"]["probes"][1]["reason"] = "edited"
    assert "does not match its integrity seal" in seal_problem(data["verify"], data["seal"])
    assert "no integrity seal" in seal_problem(data["verify"], None)


def test_a_seal_is_bound_to_the_image_id(slim: ImagePlan) -> None:
    record = verified(image_id("slim"), slim).record.to_json()
    moved = {**record, "image_id": image_id("another image")}
    assert (
        seal_problem(moved, seal(record).to_json()) == "the record's seal is for another image id"
    )


def test_with_a_key_only_a_record_sealed_with_that_key_holds(slim: ImagePlan) -> None:
    record = verified(image_id("slim"), slim).record.to_json()
    keyed = seal(record, b"k1").to_json()
    assert seal_problem(record, keyed, b"k1") == ""
    assert "not sealed with a key" in seal_problem(record, seal(record).to_json(), b"k1")
    assert "sealed with another key" in seal_problem(record, keyed, b"k2")
    # Someone without the key edits the record and recomputes the (public) digest.
    edited = {**record, "status": "pass", "device": "cuda:0"}
    forged = {**keyed, "digest": seal(edited).digest}
    assert "keyed seal does not match" in seal_problem(edited, forged, b"k1")
    assert seal_problem(edited, forged) == ""  # the plain digest alone cannot tell


def test_a_record_edited_on_disk_is_refused_by_the_gate_with_the_reason(
    tmp_path: Path, slim: ImagePlan
) -> None:
    image = image_id("slim")
    path = _on_disk(tmp_path, slim, image)
    assert decide(slim, image, verify_evidence(tmp_path / "results")).allowed
    data = json.loads(path.read_text())
    data["verify"]["probes"][1]["reason"] = "flipped by hand"
    path.write_text(json.dumps(data))
    decision = decide(slim, image, verify_evidence(tmp_path / "results"))
    assert not decision.allowed
    assert "integrity: the record does not match its integrity seal" in decision.reasons[0]


def test_the_gate_with_a_key_refuses_records_sealed_without_it(
    tmp_path: Path, slim: ImagePlan
) -> None:
    image = image_id("slim")
    _on_disk(tmp_path, slim, image, key=b"secret")
    results = tmp_path / "results"
    assert decide(slim, image, verify_evidence(results, b"secret")).allowed
    assert decide(slim, image, verify_evidence(results)).allowed  # the digest still holds
    refused = decide(slim, image, verify_evidence(results, b"other secret"))
    assert not refused.allowed and "sealed with another key" in refused.reasons[0]


# The predicate and what attest verify accepts --------------------------------------------------


def _predicate(**fields: Any) -> dict[str, Any]:
    plan_less = passing("env", CPU_FACTS)
    from tests.fakes import verify_record

    record = verify_record(plan_less, passing("autograd"), passing("ddp"), **fields)
    evidence = Evidence("run-1", "x", record, engine={"server_version": "28"})
    return predicate(
        evidence, reference="r/x", digest=DIGEST, imagekit_version="0.1.0", seal=DIGEST
    ).to_json()


def test_the_committed_predicate_schema_is_what_imagekit_generates() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == predicate_schema_text(), (
        "imagekit/data/verify-predicate.schema.json is out of date; run "
        "`imagekit schema --attestation --out imagekit/data/verify-predicate.schema.json`"
    )
    jsonschema.Draft202012Validator.check_schema(predicate_schema())


def test_a_predicate_validates_against_the_schema_and_says_what_the_issue_asks() -> None:
    body = _predicate()
    jsonschema.Draft202012Validator(predicate_schema()).validate(body)
    assert body["image"] == {"reference": "r/x", "digest": DIGEST, "image_id": image_id("image")}
    assert body["level"] == "cpu" and body["verify_run"] == "run-1"
    assert {p["name"]: p["status"] for p in body["probes"]} == {
        "env": "pass",
        "autograd": "pass",
        "ddp": "pass",
    }
    assert body["engine"] == {"server_version": "28"} and body["gpu"] is None
    assert body["imagekit_version"] == "0.1.0"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**body, "level": "tpu"}, predicate_schema())


def test_a_gpu_run_names_the_gpu_model_and_driver() -> None:
    from tests.fakes import verify_record

    facts = {**CPU_FACTS, "gpu_name": "NVIDIA H200", "driver": "580.65.06", "gpu_count": 1}
    record = verify_record(passing("env", facts), device="cuda")
    body = predicate(
        Evidence("r", "x", record), reference="r/x", digest=DIGEST, imagekit_version="0"
    ).to_json()
    assert body["gpu"]["model"] == "NVIDIA H200" and body["gpu"]["driver"] == "580.65.06"


@pytest.mark.parametrize(
    "required,ok,why",
    [
        (Requirement(), True, "level cpu (run run-1)"),
        (Requirement("cpu", ("ddp",)), True, "level cpu"),
        (Requirement("gpu"), False, "level cpu < gpu"),
        (Requirement(None, ("cudnn",)), False, "cudnn not run"),
    ],
)
def test_judge_checks_the_attested_record_against_what_is_required(
    required: Requirement, ok: bool, why: str
) -> None:
    got, said, records = judge([_predicate()], required, DIGEST)
    assert got is ok and why in said and len(records) == 1


def test_judge_ignores_records_of_other_digests_and_what_is_no_predicate() -> None:
    other = {**_predicate(), "image": {**_predicate()["image"], "digest": "sha256:" + "e" * 64}}
    ok, why, _ = judge([other, {"level": "gpu"}], Requirement(), DIGEST)
    assert not ok and "no readable imagekit verify record" in why


def test_judge_needs_every_platform_to_meet_the_requirement() -> None:
    amd = {**_predicate(), "platform": "linux/amd64"}
    arm = {**_predicate(), "platform": "linux/arm64", "level": "static"}
    ok, why, _ = judge([amd, arm], Requirement("cpu"), DIGEST)
    assert not ok and why.endswith("linux/arm64: level static < cpu (attested by run run-1)")


# The SBOM ------------------------------------------------------------------------------------


PIP = json.dumps(
    [
        {"name": "torch", "version": "2.14.1+cu130"},
        {"name": "nvidia-cudnn-cu13", "version": "9.13.0.50"},
        {"name": "nvidia_nccl_cu13", "version": "2.27.7"},
        {"name": "numpy", "version": "2.3.0"},
    ]
)
DPKG = "libc6\t2.36-9+deb12u10\tamd64\nbase-files\t12.4+deb12u11\tamd64\n\nbroken line\n"


def test_one_sbom_holds_os_and_python_packages_and_validates() -> None:
    stack = cuda_stack(
        ImageLabels(cuda="13.0", cudnn="9.13", nccl="2.27"), {"cuda": "13.0", "nccl": "2.27.7"}
    )
    held = inventory(
        "r/x:1",
        DIGEST,
        image_id("x"),
        pip_json=PIP,
        dpkg=DPKG,
        os_release='PRETTY_NAME="Debian"\nID=debian\nVERSION_ID="12"\n',
        stack=stack,
    )
    document = CycloneDx().image_sbom(held)
    assert problems(document) == ""
    assert document["specVersion"] == "1.6"
    assert document["metadata"]["component"]["version"] == DIGEST
    by_name = {c["name"]: c for c in document["components"]}
    assert by_name["libc6"]["purl"] == (
        "pkg:deb/debian/libc6@2.36-9%2Bdeb12u10?arch=amd64&distro=debian-12"
    )
    assert by_name["numpy"]["purl"] == "pkg:pypi/numpy@2.3.0"
    for name in ("torch", "nvidia-cudnn-cu13", "nvidia_nccl_cu13"):
        props = {p["name"]: p["value"] for p in by_name[name]["properties"]}
        assert props["imagekit:cuda:version"] == "13.0"
        assert props["imagekit:cudnn:version"] == "9.13"
        assert props["imagekit:nccl:version"] == "2.27.7"  # seen inside beats the label
    assert "imagekit:cuda:version" not in {p["name"] for p in by_name["numpy"]["properties"]}
    assert all(c["version"] for c in document["components"])


def test_the_validator_refuses_what_is_not_cyclonedx() -> None:
    assert problems({"bomFormat": "CycloneDX", "specVersion": "1.6", "components": [{}]})


def test_inventory_parsing() -> None:
    assert [p.name for p in os_packages(DPKG)] == ["base-files", "libc6"]
    assert distro('ID=ubuntu\nVERSION_ID="24.04"\n') == "ubuntu-24.04"
    assert cuda_stack(ImageLabels()) == {}


# Signing in publish and promotion -------------------------------------------------------------


class World:
    def __init__(self, tmp_path: Path, plan: ImagePlan) -> None:
        self.engine = FakeEngine(
            outputs={
                "python3": '[{"name": "torch", "version": "2.13.0"}]',
                "dpkg-query": "libc6\t2.36\tamd64\n",
                "cat": "ID=debian\nVERSION_ID=12\n",
            }
        )
        self.image = self.engine.add(plan.reference, image_id("slim")).id
        self.registry = FakeRegistry(self.engine)
        self.signer = FakeSigner()
        self.sbom = FakeSbom()
        self.store = store(tmp_path)
        self.plan = plan
        self.audit: AuditWith | None = None
        self.builds: list[BuildEvidence] = []

    def audited(self, offered: dict[str, Offered], now: str) -> None:
        """Publish's gate audits against a suite offering `offered`, at `now`."""
        ports = AuditPorts(self.engine, FakeContents(), FakeIndexes(offered), self.store, Events())
        self.audit = AuditWith(ports, AuditSettings(threshold=Threshold.NONE, now=now))

    def publish(self, evidence: list[Evidence], signer: bool = True, **options: Any) -> Any:
        ports = PublishPorts(
            self.registry,
            self.store,
            evidence,
            Events(),
            self.sbom,
            signer=self.signer if signer else None,
            audit=self.audit,
            builds=self.builds,
        )
        group = ImageGroup((self.plan,), 1)
        return publish_images(settings(**options), [group], ports, self.engine).records[0]


def test_publish_signs_the_digest_and_attests_the_gating_record_and_the_sbom(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    record = world.publish([verified(world.image, slim)])
    assert record.status is PublishStatus.PUBLISHED, record.reasons
    digest = record.tags[0].digest
    assert record.signed_digest == digest
    assert world.signer.signed == [f"{slim.repository}@{digest}"]
    assert record.attestations == (VERIFY_PREDICATE, SBOM_PREDICATE)
    kinds = {t: p for _, t, p in world.signer.attestations}
    body = VerifyPredicate.model_validate(kinds[VERIFY_PREDICATE])
    assert body.image.digest == digest and body.image.image_id == world.image
    assert body.verify_run == "20261130T000000Z-aaaa"
    assert [c["name"] for c in kinds[SBOM_PREDICATE]["components"]] == ["torch", "libc6"]
    assert world.sbom.seen[0].distro == "debian-12"
    reader = FakeAttestationReader(world.signer)
    found = reader.attested(f"{slim.repository}@{digest}", VERIFY_PREDICATE)
    # (this fake record names no level; its probes passed)
    assert judge(found.predicates, Requirement(None, ("autograd",)), found.digest)[0]


def test_publish_without_a_signer_signs_nothing(tmp_path: Path, slim: ImagePlan) -> None:
    world = World(tmp_path, slim)
    record = world.publish([verified(world.image, slim)], signer=False)
    assert record.status is PublishStatus.PUBLISHED
    assert record.signed_digest is None and world.signer.signed == []


def test_a_signing_failure_fails_the_image_with_cosigns_reason(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    world.signer.failing.add("sign")
    record = world.publish([verified(world.image, slim)])
    assert record.status is PublishStatus.FAILED
    assert "pushed, but signing" in record.reasons[-1] and "decryption failed" in record.reasons[-1]
    world.signer.failing = {"attest"}
    again = world.publish([verified(world.image, slim)])
    assert again.status is PublishStatus.FAILED and again.signed_digest is not None
    assert "attesting the verify record failed" in again.reasons[-1]


def test_a_dry_run_and_a_refused_image_sign_nothing(tmp_path: Path, slim: ImagePlan) -> None:
    world = World(tmp_path, slim)
    assert world.publish([verified(world.image, slim)], dry_run=True).signed_digest is None
    assert world.publish([]).status is PublishStatus.REFUSED
    assert world.signer.signed == []


def test_a_forced_image_is_signed_but_carries_no_verify_record(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    record = world.publish([], force=True)
    assert record.forced and record.attestations == (SBOM_PREDICATE,)
    reader = FakeAttestationReader(world.signer)
    found = reader.attested(world.signer.signed[0], VERIFY_PREDICATE)
    assert found.state == "no attestation"


def test_a_record_with_a_broken_seal_is_never_attested(tmp_path: Path, slim: ImagePlan) -> None:
    world = World(tmp_path, slim)
    edited = verified(world.image, slim)
    broken = Evidence(edited.run_id, edited.name, edited.record, seal_problem="edited")
    record = world.publish([broken])
    assert record.status is PublishStatus.REFUSED and world.signer.signed == []
    assert "integrity: edited" in record.reasons[0]


def test_a_candidate_is_attested_and_its_promotion_attests_the_gating_records(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    pushed = world.publish([verified(world.image, slim)], candidate="7")
    digest = pushed.tags[0].digest
    assert pushed.attestations == (VERIFY_PREDICATE, SBOM_PREDICATE)
    source = f"{slim.repository}:{candidate_tag(slim.tag, '7')}"
    body = json.dumps({"mediaType": OCI_MANIFEST, "config": {"digest": world.image}}).encode()
    assert digest is not None
    world.registry.documents[source] = ManifestDocument(OCI_MANIFEST, body, digest, world.image)
    gpu_run = verified(world.image, slim)
    gpu_run = Evidence("20261201T000000Z-bbbb", gpu_run.name, gpu_run.record)
    ports = PublishPorts(
        world.registry,
        world.store,
        [gpu_run, verified(world.image, slim)],
        Events(),
        world.sbom,
        signer=world.signer,
    )
    promoted = publish_images(
        settings(from_candidate="7"), [ImageGroup((slim,), 1)], ports, None
    ).records[0]
    assert promoted.status is PublishStatus.PUBLISHED, promoted.reasons
    assert promoted.signed_digest == digest and promoted.attestations == (VERIFY_PREDICATE,)
    # Same digest, same repository: the candidate's attestations are the promoted image's.
    reference = f"{slim.repository}@{digest}"
    runs = [p["verify_run"] for r, t, p in world.signer.attestations if t == VERIFY_PREDICATE]
    assert runs == ["20261130T000000Z-aaaa", "20261201T000000Z-bbbb"]
    assert {r for r, _, _ in world.signer.attestations} == {reference}
    found = FakeAttestationReader(world.signer).attested(reference, SBOM_PREDICATE)
    assert found.state == "ok"


# Checking an image's attestations (`imagekit attest verify`, `imagekit doctor --key`) --------


def test_a_published_image_passes_the_check_and_says_what_held(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    digest = world.publish([verified(world.image, slim)]).signed_digest
    image = f"{slim.repository}@{digest}"
    check = check_attestations(FakeAttestationReader(world.signer), image, Requirement(), NOW)
    assert check.ok and check.failure() is None
    assert check.summary("k.pub") == (
        f"{image}@{digest}: signed by k.pub; attested {check.reason}; "
        "requires a signed verify record: ok"
    )
    document = check.to_json()
    assert document["ok"] is True and document["state"] == "ok" and document["digest"] == digest
    assert [r["verify_run"] for r in document["records"]] == ["20261130T000000Z-aaaa"]


def test_an_image_short_of_the_requirement_or_signed_by_another_key_is_not_attested(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    image = f"{slim.repository}@{world.publish([verified(world.image, slim)]).signed_digest}"
    short = check_attestations(
        FakeAttestationReader(world.signer), image, Requirement(None, ("no-such-probe",)), NOW
    )
    error = short.failure()
    assert error is not None and error.exit_code == 8
    assert error.message == f"{image}: {short.reason}" and "no-such-probe not run" in short.reason
    stranger = FakeAttestationReader(world.signer, key="other.key")
    other = check_attestations(stranger, image, Requirement(), NOW)
    assert not other.ok and other.found.state == "other key" and other.records == ()
    assert other.to_json()["reason"] == "the image is signed, but not by this key"


def test_the_audit_the_gate_ran_is_attested_and_checked_for_its_age_and_pending_fixes(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    # Refusing nothing, the gate lets through an image lacking one fix: recorded and attested.
    world.audited({"libssl3:amd64": SSL_FIX}, "2026-12-01T12:00:00+00:00")
    digest = world.publish([verified(world.image, slim)]).signed_digest
    image = f"{slim.repository}@{digest}"
    [(_, _, body)] = [a for a in world.signer.attestations if a[1] == AUDIT_PREDICATE]
    assert body["digest"] == digest and body["audit"]["image_id"] == world.image
    reader = FakeAttestationReader(world.signer)

    def check(**wanted: Any) -> Any:
        return check_attestations(reader, image, Requirement(None, (), **wanted), NOW)

    assert check(audit_days=7).ok  # 6 days old, and it passed (threshold none)
    old = check(audit_days=5)
    assert not old.ok and "older than 5 days" in old.reason and old.failure() is not None
    pending = check(no_pending=True)
    assert not pending.ok and "pending: libssl3 -> 3.0.22-1~deb12u2" in pending.reason
    assert "1 pending fixes" in check(audit_days=30).reason
    # An image published without an audit has none to show.
    bare = World(tmp_path / "bare", slim)
    bare_image = f"{slim.repository}@{bare.publish([verified(bare.image, slim)]).signed_digest}"
    none = check_attestations(
        FakeAttestationReader(bare.signer), bare_image, Requirement(audit_days=30), NOW
    )
    assert not none.ok and none.reason.startswith("audit: ")


def test_publish_attests_the_build_provenance_and_a_statement_not_of_this_image_fails(
    tmp_path: Path, slim: ImagePlan
) -> None:
    labels = {
        L.INPUT_HASH: "sha256:" + "1" * 64,
        L.CELL: "2.13.0-cpu-py3.11",
        L.BASE_INDEXES: "http://deb.debian.org/debian-security/dists/bookworm-security/InRelease "
        "sha256:" + "5" * 64,
        "org.opencontainers.image.source": "https://github.com/acme-ml/pytorch-images",
        "org.opencontainers.image.revision": "0123abc",
        "org.opencontainers.image.base.name": "imagekit-base/debian:bookworm",
    }
    world = World(tmp_path, slim)
    world.engine.add(slim.reference, world.image, labels)
    wheel = Material(name="wheelhouse/torch-2.13.0.whl", sha256="7" * 64)
    built = BuildRecord(
        name=slim.name, reference=slim.reference, flavour=slim.flavour, status=BuildStatus.BUILT,
        message="built", image_id=world.image, input_hash=labels[L.INPUT_HASH], duration_s=1,
        parent_id="sha256:" + "b" * 64, materials=(wheel,),
    )  # fmt: skip
    world.builds = [BuildEvidence("20261207T000000Z-cccc", slim.name, built)]
    image = f"{slim.repository}@{world.publish([verified(world.image, slim)]).signed_digest}"
    [(_, _, statement)] = [a for a in world.signer.attestations if a[1] == PROVENANCE_PREDICATE]
    definition = statement["buildDefinition"]
    assert definition["internalParameters"]["inputHash"] == labels[L.INPUT_HASH]
    assert [d["uri"] for d in definition["resolvedDependencies"]] == [
        "git+https://github.com/acme-ml/pytorch-images",
        "docker-image:imagekit-base/debian:bookworm",
        "file:wheelhouse/torch-2.13.0.whl",
        "http://deb.debian.org/debian-security/dists/bookworm-security/InRelease",
    ]
    assert definition["resolvedDependencies"][0]["digest"] == {"gitCommit": "0123abc"}
    assert statement["runDetails"]["metadata"]["invocationId"] == "20261207T000000Z-cccc"
    reader, wanted = FakeAttestationReader(world.signer), Requirement(provenance=True)
    held = check_attestations(reader, image, wanted, NOW, lambda: labels)
    assert held.ok and "provenance of build run 20261207T000000Z-cccc" in held.reason, held.reason
    # A statement that is not this image's (another input hash): exit 8, naming both.
    other = {**labels, L.INPUT_HASH: "sha256:" + "2" * 64}
    forged = check_attestations(reader, image, wanted, NOW, lambda: other)
    assert not forged.ok and forged.failure() is not None
    assert "no attested provenance matches the image (input hash sha256:222" in forged.reason
    # Published without its build record at hand: no statement to show.
    bare = World(tmp_path / "bare", slim)
    bare_image = f"{slim.repository}@{bare.publish([verified(bare.image, slim)]).signed_digest}"
    none = check_attestations(FakeAttestationReader(bare.signer), bare_image, wanted, NOW)
    assert not none.ok and none.reason.startswith("provenance: ")


def test_the_attested_level_is_the_best_passing_record_or_why_there_is_none(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    image = f"{slim.repository}@{world.publish([verified(world.image, slim)]).signed_digest}"
    found = attested_level(FakeAttestationReader(world.signer), image)
    assert found.state == "ok" and found.digest == image.rsplit("@", 1)[1]
    unsigned = attested_level(FakeAttestationReader(FakeSigner()), image)
    assert unsigned.to_json() == {
        "state": "unsigned",
        "digest": "",
        "level": None,
        "why": "the image is not signed",
    }


def test_the_other_key_and_no_signature_are_told_apart() -> None:
    signer = FakeSigner()
    assert FakeAttestationReader(signer).attested("r@" + DIGEST, VERIFY_PREDICATE).state == (
        "unsigned"
    )
    signer.sign("r@" + DIGEST)
    stranger = FakeAttestationReader(signer, key="other.key")
    assert stranger.attested("r@" + DIGEST, VERIFY_PREDICATE).state == "other key"


# The cosign adapter, over a stand-in cosign ----------------------------------------------------


def _fake_cosign(tmp_path: Path, stdout: str = "", stderr: str = "", code: int = 0) -> Path:
    log = tmp_path / "argv.log"
    script = tmp_path / "cosign"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {log}\n'
        f"cat <<'OUT'\n{stdout}\nOUT\n"
        f"cat >&2 <<'ERR'\n{stderr}\nERR\n"
        f"exit {code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return log


def test_cosign_signs_a_loopback_registry_over_http_and_reports_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _fake_cosign(tmp_path, stderr="Error: signing: decrypt: wrong password", code=1)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    signer = Cosign("k.key")
    error = signer.sign("127.0.0.1:5000/a/b@" + DIGEST)
    assert error == "cosign: signing: decrypt: wrong password"
    argv = log.read_text().split()
    assert argv[:4] == ["sign", "--key", "k.key", "--tlog-upload=false"]
    assert "--allow-http-registry" in argv and argv[-1] == "127.0.0.1:5000/a/b@" + DIGEST
    signer.sign("ghcr.io/a/b@" + DIGEST)
    assert "--allow-http-registry" not in log.read_text().splitlines()[-1]
    assert loopback("localhost:5000/a") and not loopback("ghcr.io/a")


def test_cosign_refusals_are_named() -> None:
    refusal = cosign_adapter._refusal
    assert refusal("Error: no signatures found\n", "signature").state == "unsigned"
    other = refusal("Error: no matching signatures: invalid signature\n", "signature")
    assert other.state == "other key"
    none = refusal("Error: no matching attestations: Found: 0, Expected 1", "attestation")
    assert none.state == "no attestation"


def test_cosign_predicates_are_read_from_the_envelopes_for_this_digest() -> None:
    import base64

    def envelope(digest: str, kind: str) -> str:
        statement = {
            "predicateType": kind,
            "subject": [{"name": "r", "digest": {"sha256": digest.split(":")[1]}}],
            "predicate": {"level": "cpu"},
        }
        payload = base64.b64encode(json.dumps(statement).encode()).decode()
        return json.dumps({"payloadType": "application/vnd.in-toto+json", "payload": payload})

    other = "sha256:" + sha256(b"x").hexdigest()
    lines = "\n".join(
        [envelope(DIGEST, VERIFY_PREDICATE), envelope(other, VERIFY_PREDICATE), "noise"]
    )
    found = cosign_adapter._predicates(lines, VERIFY_PREDICATE, DIGEST)
    assert found == [{"level": "cpu"}]


def test_a_missing_cosign_is_bad_input_with_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from imagekit.errors import InputError

    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(InputError) as caught:
        Cosign("k.key")
    assert "make engine" in caught.value.hint


def test_status_of_a_refused_record_is_kept(slim: ImagePlan) -> None:
    """A forged `pass` in a predicate does not help when a probe says otherwise."""
    body = _predicate()
    body["probes"] = [{**p, "status": Status.FAIL} for p in body["probes"]]
    ok, why, _ = judge([body], Requirement(None, ("ddp",)), DIGEST)
    assert not ok and "ddp fail" in why


def test_attest_verify_options_become_the_requirement() -> None:
    asked = AttestVerifyRequest(
        image="r/i:t", key="k.pub", require_audit_within=7, require_no_pending=True,
        require_provenance=True,
    )  # fmt: skip
    assert asked.requirement() == Requirement(None, (), 7, True, True)
    assert asked.requirement().describe() == (
        "an audit at most 7 days old that passed, no pending security fix, provenance of this image"
    )
