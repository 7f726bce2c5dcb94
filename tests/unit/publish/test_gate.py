"""The publish gate, tag/fact checks and push-failure classification (no engine, no registry)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.adapters.registry import classify, push, registry_auth, split_reference
from imagekit.adapters.results import RunFolder, verify_evidence
from imagekit.kernel.publish_records import Evidence
from imagekit.kernel.records import (
    BuildRecord,
    Check,
    ImageRecord,
    Level,
    LevelState,
    ProbeResult,
    Status,
)
from imagekit.matrix.load import load_matrix
from imagekit.matrix.plan import ImagePlan, retarget
from imagekit.publish.gate import Problem, decide, remedy
from imagekit.publish.run import candidate_tag
from imagekit.verify.agreement import Identity, disagreements
from tests.fakes import FakePushClient, audit_record, verify_record

ROOT = Path(__file__).resolve().parents[3]
IMAGE = "sha256:" + "a" * 64


@pytest.fixture(scope="module")
def plan() -> ImagePlan:
    matrix = load_matrix(ROOT / "matrix.yaml")
    return next(p for p in matrix.plans if p.name == "2.14.1-cu130-py3.12-slim")


def record(
    image_id: str = IMAGE, statuses: dict[str, str] | None = None, **facts: object
) -> Evidence:
    statuses = statuses or dict.fromkeys(
        ("env", "autograd", "matmul", "higher_order", "compile", "ddp"), "pass"
    )
    seen = {"torch": "2.14.1+cu130", "cuda": "13.0", "cudnn": "9.24.0", "python": "3.12.3"} | facts
    probes = [
        ProbeResult(
            probe=p,
            status=Status(s),
            checks=(Check(name=f"{p} works", ok=True),) if s == "pass" else (),
            facts=seen if p == "env" else {},
        )
        for p, s in statuses.items()
    ]
    structure = (Check(name="non-root", ok=True, detail=""),)
    return Evidence(
        "run1",
        "2.14.1-cu130-py3.12-slim",
        verify_record(*probes, image=image_id, structure=structure),
    )


def test_a_passing_run_for_this_image_opens_the_gate(plan: ImagePlan) -> None:
    decision = decide(plan, IMAGE, [record()])
    assert decision.allowed and decision.reasons == ()
    assert decision.evidence.verify_run == "run1"


def test_no_results_for_this_image_id_closes_the_gate(plan: ImagePlan) -> None:
    decision = decide(plan, IMAGE, [record("sha256:" + "b" * 64)])
    assert not decision.allowed
    assert "no verify results for image sha256:aaaaaaaaaaaa" in decision.reasons[0]
    assert "1 results belong to other image ids" in decision.reasons[0]


def test_a_failed_required_probe_closes_the_gate_with_its_name(plan: ImagePlan) -> None:
    failing = record(
        statuses={
            "env": "pass",
            "autograd": "fail",
            "matmul": "pass",
            "higher_order": "timeout",
            "compile": "pass",
        }
    )
    decision = decide(plan, IMAGE, [failing])
    assert not decision.allowed
    text = " ".join(decision.reasons)
    assert "autograd fail" in text and "higher_order timeout" in text and "not run: ddp" in text


def test_any_passing_run_of_the_same_image_is_enough(plan: ImagePlan) -> None:
    failing = record(statuses={"env": "pass", "autograd": "fail"})
    assert decide(plan, IMAGE, [failing, record()]).allowed


@pytest.mark.parametrize(
    "facts,problem",
    [
        ({"torch": "2.13.0+cu130"}, "tag says torch 2.14.1, the image has 2.13.0"),
        ({"cuda": "12.6"}, "tag says CUDA 13.0, the image has 12.6"),
        ({"cudnn": "8.9.7"}, "tag says cuDNN 9, the image has 8.9.7"),
        ({"python": "3.11.9"}, "tag says Python 3.12, the image has 3.11"),
    ],
)
def test_a_tag_that_disagrees_with_the_probed_facts_is_refused(
    plan: ImagePlan, facts: dict, problem: str
) -> None:
    decision = decide(plan, IMAGE, [record(**facts)])
    assert not decision.allowed
    assert problem in decision.reasons


def _with(evidence: Evidence, **fields: object) -> Evidence:
    """The same evidence with some fields of its verify record changed."""
    changed = evidence.record.model_copy(update=fields)
    return Evidence(evidence.run_id, evidence.name, changed)


# Fail closed: each of these records failed verify in its own way, and each one alone must keep
# the image out, even where every required probe passed.
@pytest.mark.parametrize(
    "fields,reason",
    [
        (
            # A CUDA label on a CPU image: verify failed it (level none), the probes passed.
            {
                "labels_agree": (
                    Check(name="a CPU image carries no CUDA labels", ok=False, detail="cuda"),
                ),
                "status": "fail",
                "level": "none",
                "levels": {Level.STATIC: LevelState.FAIL, Level.CPU: LevelState.PASS},
            },
            "labels: a CPU image carries no CUDA labels",
        ),
        (
            {"structure": (Check(name="no pip cache", ok=False, detail="/root/.cache/pip"),)},
            "structure: no pip cache",
        ),
        (
            {"levels": {Level.STATIC: LevelState.PASS, Level.CPU: LevelState.FAIL}},
            "level cpu fail",
        ),
        (
            # Every probe passed on a GPU-less machine, but the gpu level was required.
            {
                "levels": {Level.STATIC: LevelState.PASS, Level.GPU: LevelState.NOT_RUN},
                "required_levels": (Level.STATIC, Level.GPU),
            },
            "level gpu not run",
        ),
        ({"status": "fail"}, "verify recorded this image as failed"),
    ],
)
def test_a_record_that_failed_verify_closes_the_gate_whatever_its_probes_say(
    plan: ImagePlan, fields: dict[str, object], reason: str
) -> None:
    decision = decide(plan, IMAGE, [_with(record(), **fields)])
    assert not decision.allowed
    assert any(reason in r for r in decision.reasons), decision.reasons


def test_a_skipped_required_probe_closes_the_gate(plan: ImagePlan) -> None:
    statuses = dict.fromkeys(("env", "autograd", "matmul", "higher_order"), "pass")
    decision = decide(plan, IMAGE, [record(statuses={**statuses, "ddp": "skip"})])
    assert not decision.allowed and "ddp skip" in " ".join(decision.reasons)


def test_force_overrides_the_gate_and_says_so(plan: ImagePlan) -> None:
    decision = decide(plan, IMAGE, [], force=True)
    assert decision.allowed and decision.evidence.forced
    assert decision.evidence.overridden[0].startswith("no verify results")


def test_tag_facts_of_a_cpu_image(plan: ImagePlan) -> None:
    matrix = load_matrix(ROOT / "matrix.yaml")
    cpu = next(p for p in matrix.plans if p.name == "2.15.0-cpu-py3.12-slim")
    facts = {"torch": "2.15.0+cpu", "cuda": None, "python": "3.12.3"}
    assert disagreements(Identity.from_cell(cpu.cell), facts, "tag") == []


@pytest.mark.parametrize(
    "message,kind",
    [
        ("received unexpected HTTP status: 503 Service Unavailable", "transient"),
        ("read tcp 127.0.0.1:5000: connection reset by peer", "transient"),
        ("net/http: TLS handshake timeout", "transient"),
        ("denied: requested access to the resource is denied", "permanent"),
        ("unauthorized: authentication required", "permanent"),
        ("manifest invalid: manifest invalid", "permanent"),
        ("something nobody has seen", "permanent"),
    ],
)
def test_push_failures_are_classified(message: str, kind: str) -> None:
    assert classify(message) == kind


def test_an_error_item_in_the_push_stream_is_a_failure_even_though_nothing_raised() -> None:
    client = FakePushClient(
        [
            [
                {"status": "Preparing"},
                {"errorDetail": {"message": "denied: no"}, "error": "denied: no"},
            ]
        ]
    )
    outcome = push(client.engine, "r.example/a/b:t", sleep=lambda s: None)
    assert not outcome.ok and outcome.kind == "permanent" and outcome.attempts == 1


def test_transient_failures_are_retried_with_backoff_a_bounded_number_of_times() -> None:
    failing = [{"error": "received unexpected HTTP status: 503 Service Unavailable"}]
    waits: list[float] = []
    client = FakePushClient([failing, failing, [{"status": "pushed"}]])
    outcome = push(client.engine, "r/a:t", backoff_s=1.0, sleep=waits.append)
    assert outcome.ok and outcome.attempts == 3 and waits == [1.0, 2.0]
    client = FakePushClient([failing] * 4)
    outcome = push(client.engine, "r/a:t", attempts=4, sleep=waits.append)
    assert not outcome.ok and outcome.attempts == 4 and outcome.kind == "transient"


@pytest.mark.parametrize(
    "repository,registry,expected",
    [
        ("ghcr.io/acme/pytorch", None, "ghcr.io/acme/pytorch"),
        ("ghcr.io/acme/pytorch", "127.0.0.1:5000", "127.0.0.1:5000/acme/pytorch"),
        ("imagekit-demo/pytorch", "127.0.0.1:5000", "127.0.0.1:5000/imagekit-demo/pytorch"),
        ("localhost:5000/x", "reg.example/team", "reg.example/team/x"),
    ],
)
def test_retarget_moves_a_repository_to_another_registry(
    repository: str, registry: str | None, expected: str
) -> None:
    assert retarget(repository, registry) == expected


def test_candidate_tags_and_reference_parts() -> None:
    assert candidate_tag("2.14.1-cuda13.0-cudnn9-py3.12-slim", "123") == (
        "2.14.1-cuda13.0-cudnn9-py3.12-slim-candidate-123"
    )
    assert split_reference("127.0.0.1:5000/team/pytorch:tag") == (
        "127.0.0.1:5000",
        "team/pytorch",
        "tag",
    )


def test_registry_credentials_come_from_the_environment_or_the_docker_config(
    tmp_path: Path,
) -> None:
    env = {"IMAGEKIT_REGISTRY_USER": "u", "IMAGEKIT_REGISTRY_PASSWORD": "p"}
    assert registry_auth("ghcr.io", env) == {"username": "u", "password": "p"}
    (tmp_path / "config.json").write_text('{"auths": {"ghcr.io": {"auth": "YWxpY2U6czNjcmV0"}}}')
    assert registry_auth("ghcr.io", {"DOCKER_CONFIG": str(tmp_path)}) == {
        "username": "alice",
        "password": "s3cret",
    }
    assert registry_auth("other.io", {"DOCKER_CONFIG": str(tmp_path)}) is None


def test_verify_records_are_loaded_newest_run_first(tmp_path: Path) -> None:
    for run in ("20260101T000000Z-aaaa", "20261130T000000Z-bbbb"):
        folder = RunFolder.create(tmp_path, run)
        folder.update_image("x", ImageRecord(verify=record().record))
        built = BuildRecord(
            name="y", reference="r/y:t", flavour="slim", status="failed", message="", duration_s=1
        )
        folder.update_image("y", ImageRecord(build=built))
    records = verify_evidence(tmp_path)
    assert [r.run_id for r in records] == ["20261130T000000Z-bbbb", "20260101T000000Z-aaaa"]
    assert [r.name for r in records] == ["x", "x"]


def test_every_refusal_ends_with_what_to_do_about_its_reasons(plan: ImagePlan) -> None:
    unverified = decide(plan, IMAGE, [])
    assert unverified.reasons[-1] == remedy([Problem.NO_RECORD])
    failing = record(statuses={"env": "pass", "autograd": "fail"})
    reasons = decide(plan, IMAGE, [failing]).reasons
    assert reasons[-1].startswith("to publish it: verify again with the required probes")
    assert "then fix what the failing probes report" in reasons[-1]
    # Allowed, or forced through: nothing to do, no such line.
    assert decide(plan, IMAGE, [record()]).reasons == ()
    forced = decide(plan, IMAGE, [], force=True)
    assert not any(r.startswith("to publish it") for r in forced.reasons)


def test_an_image_whose_audit_failed_is_refused_naming_each_package_and_the_rebuild(
    plan: ImagePlan,
) -> None:
    audit = audit_record(("libssl3", "3.0.20-1~deb12u2", "3.0.22-1~deb12u2"))
    decision = decide(plan, IMAGE, [record()], audit=audit)
    assert not decision.allowed
    assert decision.reasons[0] == (
        "security: 1 findings at any-fix: libssl3 3.0.20-1~deb12u2 -> 3.0.22-1~deb12u2 "
        "(libssl3@3.0.22-1~deb12u2, unknown)"
    )
    assert decision.reasons[-1] == remedy([Problem.SECURITY])
    assert "bootstrap the base again" in decision.reasons[-1]


def test_a_clean_audit_keeps_the_gate_open_and_force_overrides_a_failed_one(
    plan: ImagePlan,
) -> None:
    assert decide(plan, IMAGE, [record()], audit=audit_record()).allowed
    failed = audit_record(("zlib1g", "1:1.2.13.dfsg-1", "1:1.2.13.dfsg-1+deb12u1"))
    forced = decide(plan, IMAGE, [record()], audit=failed, force=True)
    assert forced.allowed and forced.evidence.forced
    assert forced.evidence.overridden[0].startswith("security: 1 findings at any-fix: zlib1g")
