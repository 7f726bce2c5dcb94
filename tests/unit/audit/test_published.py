"""`imagekit audit --published`: the newest tag of each selected image on the registry is
pulled, audited, recorded with its release's end of patch, and (with a key) its audit attested to
the registry's digest, so `attest verify --require-audit-within` holds for a tag that lives."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.adapters.auditing import audit_targets
from imagekit.audit.attestation import AUDIT_PREDICATE
from imagekit.audit.ports import AuditPorts
from imagekit.audit.requests import AuditCommand
from imagekit.audit.run import AuditRun
from imagekit.audit.settings import AuditSettings, AuditTarget
from imagekit.errors import EngineError, InputError
from imagekit.kernel.records import Verdict
from imagekit.matrix.load import load_matrix
from imagekit.matrix.selection import Selection
from imagekit.publish.ports import RemoteManifest
from tests.fakes import (
    Events,
    FakeContents,
    FakeEngine,
    FakeIndexes,
    FakeRegistry,
    FakeSigner,
    image_id,
    store,
)
from tests.unit.audit.test_audit_run import FIXED_SSL

ROOT = Path(__file__).resolve().parents[3]
CPU = ROOT / "examples" / "cpu.yaml"
HELD = RemoteManifest(image_id("manifest p2"), image_id("config p2"))


def request(**options: object) -> AuditCommand:
    return AuditCommand(Selection(matrix=CPU), published=True, **options)  # type: ignore[arg-type]


def test_each_image_is_audited_at_its_newest_tag_and_the_unpublished_are_left_out() -> None:
    matrix = load_matrix(CPU)
    slim, full = (next(p for p in matrix.plans if p.flavour == f) for f in ("slim", "full"))
    registry = FakeRegistry(FakeEngine())
    for tag in (slim.tag, f"{slim.tag}-p1", f"{slim.tag}-p2", "latest-slim"):
        registry.tags[f"{slim.repository}:{tag}"] = HELD
    [target] = audit_targets(request(), matrix, registry)
    assert target == AuditTarget(
        slim.name, f"{slim.repository}:{slim.tag}-p2", True, slim.platform, HELD.digest, None
    )
    # Another registry: the same repository path there, and nothing published on it yet.
    assert audit_targets(request(registry="localhost:5000"), matrix, registry) == []
    assert full.name not in {t.name for t in audit_targets(request(), matrix, registry)}


def test_published_names_no_image_and_a_registry_needs_published() -> None:
    with pytest.raises(InputError, match="name no image"):
        AuditCommand(Selection(matrix=CPU), images=("x:1",), published=True)
    local = AuditCommand(Selection(matrix=CPU), registry="localhost:5000")
    with pytest.raises(InputError, match="--published reads the tags"):
        audit_targets(local, load_matrix(CPU), FakeRegistry(FakeEngine()))


def run_published(tmp_path: Path, signer: FakeSigner | None, eop: str | None = None) -> tuple:
    reference = "example.com/team/pytorch:2.13.0-cpu-py3.11-slim-p1"
    engine = FakeEngine()
    engine.pullable[reference] = engine.add(reference, image_id("published"))
    del engine.images[reference]  # only on the registry until pulled
    folder = store(tmp_path)
    ports = AuditPorts(engine, FakeContents(), FakeIndexes(FIXED_SSL), folder, Events(), signer)
    run = AuditRun(ports, AuditSettings(now="2026-12-07T12:00:00+00:00"))
    target = AuditTarget("slim", reference, True, "linux/amd64", HELD.digest, eop)
    return run, run.audit(target), engine


def test_a_published_tag_is_pulled_audited_and_its_audit_attested_to_its_digest(
    tmp_path: Path,
) -> None:
    signer = FakeSigner()
    run, record, engine = run_published(tmp_path, signer)
    assert engine.pulls == ["example.com/team/pytorch:2.13.0-cpu-py3.11-slim-p1"]
    assert record.status is Verdict.FAIL and record.pending_fixes
    [(subject, kind, body)] = signer.attestations
    assert (subject, kind) == (f"example.com/team/pytorch@{HELD.digest}", AUDIT_PREDICATE)
    assert body["digest"] == HELD.digest and body["audit"]["image_id"] == record.image_id
    assert run.attestation_failure() is None
    # Without a key nothing is attested, and the record is the same.
    _, unsigned, _ = run_published(tmp_path / "unsigned", None)
    assert unsigned == record


def test_an_attestation_that_fails_keeps_the_record_and_ends_in_exit_6(tmp_path: Path) -> None:
    signer = FakeSigner(failing={"attest"})
    run, _, _ = run_published(tmp_path, signer)
    assert list(Path(run.ports.store.root).glob("images/slim.json"))
    error = run.attestation_failure()
    assert error is not None and error.exit_code == 6 and "500" in error.message


def test_a_tag_that_cannot_be_pulled_is_engine_trouble(tmp_path: Path) -> None:
    folder = store(tmp_path)
    ports = AuditPorts(FakeEngine(), FakeContents(), FakeIndexes({}), folder, Events())
    target = AuditTarget("slim", "example.com/x:gone", True, None, HELD.digest)
    with pytest.raises(EngineError, match=r"could not pull example\.com/x:gone"):
        AuditRun(ports, AuditSettings()).audit(target)


def test_past_its_end_of_patch_the_record_says_unsupported(tmp_path: Path) -> None:
    _, ended, _ = run_published(tmp_path, None, eop="2026-06-30")
    assert ended.end_of_patch == "2026-06-30" and ended.unsupported
    _, last_day, _ = run_published(tmp_path / "last", None, eop="2026-12-07")
    assert not last_day.unsupported
