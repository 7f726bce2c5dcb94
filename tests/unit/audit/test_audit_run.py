"""The audit use case over fakes of the image's files and the security index, with a real run
folder: what is found, judged and written, sealed, for each image."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from imagekit.audit.allowlist import AllowEntry
from imagekit.audit.debian import Offered
from imagekit.audit.findings import Finding
from imagekit.audit.ports import AuditPorts
from imagekit.audit.report import audit_failure, junit
from imagekit.audit.run import AuditRun
from imagekit.audit.settings import Advisories, AuditSettings, AuditTarget
from imagekit.errors import ExitCode, InputError
from imagekit.kernel.integrity import seal_problem
from imagekit.kernel.records import AuditRecord, Verdict
from imagekit.kernel.vocabulary import (
    Ecosystem,
    FindingOrigin,
    FindingVerdict,
    Severity,
    Threshold,
)
from tests.fakes import (
    Events,
    FakeContents,
    FakeEngine,
    FakeIndexes,
    image_id,
    store,
)

SLIM = "2.13.0-cpu-py3.11-slim"
REFERENCE = f"imagekit/pytorch:{SLIM}"


FIXED_SSL = {"libssl3:amd64": Offered("libssl3", "3.0.22-1~deb12u2", "amd64", "openssl")}


def audit(
    tmp_path: Path,
    offered: dict[str, Offered],
    settings: AuditSettings | None = None,
    contents: FakeContents | None = None,
) -> tuple[AuditRecord, Path, FakeIndexes]:
    engine = FakeEngine()
    engine.add(REFERENCE, image_id("slim"))
    folder, indexes = store(tmp_path), FakeIndexes(offered)
    ports = AuditPorts(engine, contents or FakeContents(), indexes, folder, Events())
    run = AuditRun(ports, settings or AuditSettings(now="2026-12-07T12:00:00+00:00"))
    record = run.audit(AuditTarget(SLIM, REFERENCE))
    return record, folder.root, indexes


def test_a_newer_version_in_the_security_suite_fails_the_image_and_is_recorded_sealed(
    tmp_path: Path,
) -> None:
    record, root, indexes = audit(tmp_path, FIXED_SSL)
    assert record.status == Verdict.FAIL
    [finding] = record.findings
    assert (finding.package, finding.installed, finding.fixed) == (
        "libssl3", "3.0.20-1~deb12u2", "3.0.22-1~deb12u2",
    )  # fmt: skip
    assert finding.id == "openssl@3.0.22-1~deb12u2"
    assert finding.origin == FindingOrigin.SECURITY_INDEX and finding.severity == Severity.UNKNOWN
    assert finding.verdict == FindingVerdict.REFUSED
    assert record.security_index.suite == "bookworm-security"
    assert record.security_index.url.endswith("/debian-security/dists/bookworm-security/InRelease")
    assert (record.os_packages, record.python_packages, record.distro) == (2, 1, "debian-12")
    assert indexes.asked[0].arch == "amd64"
    written = json.loads((root / "images" / f"{SLIM}.json").read_text())
    assert written["audit"]["status"] == "fail"
    assert seal_problem(written["audit"], written["audit_seal"], None, "audit") == ""
    written["audit"]["status"] = "pass"  # flipped by hand
    assert "edited after audit wrote it" in seal_problem(
        written["audit"], written["audit_seal"], None, "audit"
    )


def test_an_image_the_index_has_nothing_newer_for_passes(tmp_path: Path) -> None:
    record, _, _ = audit(tmp_path, {})
    assert record.status == Verdict.PASS and record.findings == ()


def test_threshold_none_records_the_fix_without_failing(tmp_path: Path) -> None:
    record, _, _ = audit(tmp_path, FIXED_SSL, AuditSettings(threshold=Threshold.NONE))
    assert record.status == Verdict.PASS
    assert [f.verdict for f in record.findings] == [FindingVerdict.NOTED]
    assert len(record.pending_fixes) == 1


def _advisory(fixed: str, severity: Severity) -> Finding:
    return Finding(
        "GHSA-5rjg-fvgr-3xxf", "setuptools", "69.0.0", fixed, severity, FindingOrigin.OSV,
        Ecosystem.PYTHON,
    )  # fmt: skip


def test_an_allowlisted_advisory_without_a_fix_passes_with_its_reason(tmp_path: Path) -> None:
    entry = AllowEntry(
        "GHSA-5rjg-fvgr-3xxf", "setuptools", "build-time only", dt.date(2027, 1, 1), "a.yaml:1"
    )
    advisories = Advisories(("osv:/db",), (lambda python: (_advisory("", Severity.HIGH),),))
    settings = AuditSettings(Threshold.HIGH, (entry,), None, advisories)
    record, _, _ = audit(tmp_path, {}, settings)
    assert record.status == Verdict.PASS
    [finding] = record.findings
    assert finding.verdict == FindingVerdict.ALLOWED
    assert (finding.allowlist, finding.reason) == ("a.yaml:1", "build-time only")
    assert record.sources == ("security-index", "osv:/db")


def test_an_allowlisted_advisory_that_is_fixed_now_is_an_outdated_entry(tmp_path: Path) -> None:
    entry = AllowEntry(
        "GHSA-5rjg-fvgr-3xxf", "setuptools", "build-time only", dt.date(2027, 1, 1), "a.yaml:3"
    )
    advisories = Advisories(("osv:/db",), (lambda python: (_advisory("70.0.0", Severity.LOW),),))
    record, _, _ = audit(tmp_path, {}, AuditSettings(Threshold.HIGH, (entry,), None, advisories))
    assert record.status == Verdict.FAIL
    assert record.findings[0].verdict == FindingVerdict.OUTDATED
    assert record.problems == (
        "allowlist outdated: a.yaml:3: GHSA-5rjg-fvgr-3xxf in setuptools is fixed in 70.0.0;"
        " rebuild and drop the entry",
    )


@pytest.mark.parametrize(
    ("threshold", "severity", "fails"),
    [
        (Threshold.HIGH, Severity.MEDIUM, False),
        (Threshold.HIGH, Severity.HIGH, True),
        (Threshold.HIGH, Severity.CRITICAL, True),
        (Threshold.HIGH, Severity.UNKNOWN, True),  # ungraded counts as the worst
        (Threshold.LOW, Severity.LOW, True),
        (Threshold.ANY_FIX, Severity.CRITICAL, False),  # no fix exists yet: nothing to take
    ],
)
def test_a_severity_threshold_refuses_that_severity_and_worse(
    tmp_path: Path, threshold: Threshold, severity: Severity, fails: bool
) -> None:
    advisories = Advisories(("osv:/db",), (lambda python: (_advisory("", severity),),))
    record, _, _ = audit(tmp_path, {}, AuditSettings(threshold, (), None, advisories))
    assert (record.status == Verdict.FAIL) is fails


def test_the_failure_names_each_package_and_the_remedy_and_junit_fails_the_image(
    tmp_path: Path,
) -> None:
    record, _, _ = audit(tmp_path, FIXED_SSL)
    error = audit_failure({SLIM: record})
    assert error is not None and error.exit_code == ExitCode.AUDIT_FAILED
    assert "libssl3 3.0.20-1~deb12u2 -> 3.0.22-1~deb12u2" in error.message
    assert "rebuild" in error.hint
    xml = junit({SLIM: record}, "run-1")
    assert 'tests="1"' in xml and 'failures="1"' in xml and "libssl3" in xml
    assert audit_failure({SLIM: audit(tmp_path / "clean", {})[0]}) is None


def test_an_image_the_engine_lacks_is_bad_input_and_nothing_is_read(tmp_path: Path) -> None:
    contents = FakeContents()
    ports = AuditPorts(FakeEngine(), contents, FakeIndexes({}), store(tmp_path), Events())
    with pytest.raises(InputError, match="is not in the engine"):
        AuditRun(ports, AuditSettings()).audit(AuditTarget(SLIM, REFERENCE))
    assert contents.read == []
