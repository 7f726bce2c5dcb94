"""Scanners' JSON reports about an image, shaped as `trivy image --format json` and
`grype -o json` write them (trimmed to the fields a finding needs, and a few beside them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imagekit.audit.findings import Finding
from imagekit.audit.scanners import scanner_findings
from imagekit.errors import InputError, ValidationError
from imagekit.kernel.vocabulary import Ecosystem, FindingOrigin, Severity

IMAGE = "ghcr.io/acme/torch:2.5.1-cu124-slim"
OS_TARGET = f"{IMAGE} (debian 12.8)"


def _trivy_vuln(ident: str, package: str, installed: str, **more: Any) -> dict[str, Any]:
    return {
        "VulnerabilityID": ident,
        "PkgID": f"{package}@{installed}",
        "PkgName": package,
        "InstalledVersion": installed,
        "Status": "fixed" if more.get("FixedVersion") else "affected",
        "Layer": {
            "DiffID": "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"
        },
        "SeveritySource": "nvd",
        "PrimaryURL": f"https://avd.aquasec.com/nvd/{ident.lower()}",
        **more,
    }


TRIVY: dict[str, Any] = {
    "SchemaVersion": 2,
    "CreatedAt": "2025-02-03T10:12:44.381235+00:00",
    "ArtifactName": IMAGE,
    "ArtifactType": "container_image",
    "Metadata": {"OS": {"Family": "debian", "Name": "12.8"}, "ImageID": "sha256:9b1c"},
    "Results": [
        {
            "Target": OS_TARGET,
            "Class": "os-pkgs",
            "Type": "debian",
            "Vulnerabilities": [
                _trivy_vuln(
                    "CVE-2024-13176",
                    "libssl3",
                    "3.0.15-1~deb12u1",
                    FixedVersion="3.0.16-1~deb12u1",
                    SrcName="openssl",
                    SrcVersion="3.0.15-1~deb12u1",
                    Severity="MEDIUM",
                ),
                _trivy_vuln(
                    "CVE-2023-45853",
                    "zlib1g",
                    "1:1.2.13.dfsg-1",
                    SrcName="zlib",
                    Severity="CRITICAL",
                ),
                _trivy_vuln("CVE-2011-3374", "apt", "2.6.1", FixedVersion="", Severity="LOW"),
            ],
        },
        {
            "Target": "Python",
            "Class": "lang-pkgs",
            "Type": "python-pkg",
            "Vulnerabilities": [
                _trivy_vuln(
                    "CVE-2024-6345",
                    "setuptools",
                    "69.5.1",
                    PkgPath="opt/venv/lib/python3.12/site-packages/setuptools-69.5.1.dist-info/METADATA",
                    FixedVersion="70.0.0",
                    Severity="HIGH",
                ),
                _trivy_vuln(  # the same distribution in the system Python: the same finding
                    "CVE-2024-6345",
                    "setuptools",
                    "69.5.1",
                    PkgPath="usr/lib/python3/dist-packages/setuptools-69.5.1.egg-info/PKG-INFO",
                    FixedVersion="70.0.0",
                    Severity="HIGH",
                ),
                _trivy_vuln(
                    "CVE-2024-35195",
                    "requests",
                    "2.31.0",
                    FixedVersion="2.32.0",
                    Severity="MEDIUM",
                ),
            ],
        },
        {
            "Target": "opt/venv/lib/python3.12/site-packages/torch-2.5.1.dist-info/METADATA",
            "Class": "lang-pkgs",
            "Type": "python-pkg",
            "Vulnerabilities": None,
        },
    ],
}


def _grype_match(
    ident: str,
    severity: str,
    fix: dict[str, Any],
    artifact: tuple[str, str, str],
    upstream: str = "",
) -> dict[str, Any]:
    name, version, kind = artifact
    return {
        "vulnerability": {
            "id": ident,
            "dataSource": f"https://security-tracker.debian.org/tracker/{ident}",
            "namespace": "debian:distro:debian:12",
            "severity": severity,
            "urls": [],
            "cvss": [],
            "fix": fix,
            "advisories": [],
        },
        "relatedVulnerabilities": [],
        "matchDetails": [{"type": "exact-direct-match", "matcher": "dpkg-matcher"}],
        "artifact": {
            "id": "3bb2a4f1c9d0e8f7",
            "name": name,
            "version": version,
            "type": kind,
            "locations": [{"path": "/var/lib/dpkg/status"}],
            "language": "python" if kind == "python" else "",
            "licenses": [],
            "cpes": [],
            "purl": f"pkg:{kind}/{name}@{version}",
            "upstreams": [{"name": upstream}] if upstream else [],
        },
    }


GRYPE: dict[str, Any] = {
    "matches": [
        _grype_match(
            "CVE-2024-13176",
            "Medium",
            {"versions": ["3.0.16-1~deb12u1"], "state": "fixed"},
            ("libssl3", "3.0.15-1~deb12u1", "deb"),
            upstream="openssl",
        ),
        _grype_match(
            "CVE-2023-45853",
            "Critical",
            {"versions": [], "state": "wont-fix"},
            ("zlib1g", "1:1.2.13.dfsg-1", "deb"),
            upstream="zlib",
        ),
        _grype_match(
            "CVE-2005-2541",
            "Negligible",
            {"versions": [], "state": "not-fixed"},
            ("tar", "1.34+dfsg-1.2+deb12u1", "deb"),
        ),
        _grype_match(
            "GHSA-cx63-2mw6-8hw5",
            "High",
            {"versions": ["70.0.0"], "state": "fixed"},
            ("setuptools", "69.5.1", "python"),
        ),
        _grype_match(  # a Go module in a binary: neither of a finding's ecosystems
            "GHSA-4v7x-pqxf-cx7m",
            "Medium",
            {"versions": ["0.17.0"], "state": "fixed"},
            ("golang.org/x/net", "v0.15.0", "go-module"),
        ),
    ],
    "source": {"type": "image", "target": {"userInput": IMAGE}},
    "distro": {"name": "debian", "version": "12", "idLike": []},
    "descriptor": {"name": "grype", "version": "0.86.1"},
}


def _report(tmp_path: Path, document: object, name: str = "report.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document, indent=2))
    return path


def _finding(
    origin: FindingOrigin,
    ident: str,
    package: str,
    installed: str,
    fixed: str,
    severity: Severity,
    source: str = "",
) -> Finding:
    ecosystem = Ecosystem.OS if source else Ecosystem.PYTHON
    return Finding(ident, package, installed, fixed, severity, origin, ecosystem, source)


def test_a_trivy_report_gives_its_os_and_python_findings(tmp_path: Path) -> None:
    origin, found = scanner_findings(_report(tmp_path, TRIVY))
    trivy = FindingOrigin.TRIVY
    assert origin is trivy
    assert found == (  # by (package, id); setuptools once, though Trivy found it twice
        _finding(trivy, "CVE-2011-3374", "apt", "2.6.1", "", Severity.LOW, "apt"),
        _finding(
            trivy,
            "CVE-2024-13176",
            "libssl3",
            "3.0.15-1~deb12u1",
            "3.0.16-1~deb12u1",
            Severity.MEDIUM,
            "openssl",
        ),
        _finding(trivy, "CVE-2024-35195", "requests", "2.31.0", "2.32.0", Severity.MEDIUM),
        _finding(trivy, "CVE-2024-6345", "setuptools", "69.5.1", "70.0.0", Severity.HIGH),
        _finding(
            trivy, "CVE-2023-45853", "zlib1g", "1:1.2.13.dfsg-1", "", Severity.CRITICAL, "zlib"
        ),
    )


def test_a_grype_report_gives_its_os_and_python_findings(tmp_path: Path) -> None:
    origin, found = scanner_findings(_report(tmp_path, GRYPE))
    grype = FindingOrigin.GRYPE
    assert origin is grype
    assert found == (  # the Go module is skipped
        _finding(
            grype,
            "CVE-2024-13176",
            "libssl3",
            "3.0.15-1~deb12u1",
            "3.0.16-1~deb12u1",
            Severity.MEDIUM,
            "openssl",
        ),
        _finding(grype, "GHSA-cx63-2mw6-8hw5", "setuptools", "69.5.1", "70.0.0", Severity.HIGH),
        _finding(grype, "CVE-2005-2541", "tar", "1.34+dfsg-1.2+deb12u1", "", Severity.LOW, "tar"),
        _finding(
            grype, "CVE-2023-45853", "zlib1g", "1:1.2.13.dfsg-1", "", Severity.CRITICAL, "zlib"
        ),
    )


@pytest.mark.parametrize(
    ("fix", "fixed"),
    [
        ({"versions": ["2.32.0", "2.31.1"], "state": "fixed"}, "2.32.0"),  # the first
        ({"versions": ["2.32.0"], "state": "unknown"}, ""),  # only a `fixed` state counts
        ({"versions": [], "state": "not-fixed"}, ""),
        ({"state": "wont-fix"}, ""),
    ],
)
def test_grype_s_fixed_version_is_the_first_of_a_fixed_state(
    tmp_path: Path, fix: dict[str, Any], fixed: str
) -> None:
    report = {
        "matches": [_grype_match("CVE-2024-35195", "Medium", fix, ("requests", "2.31.0", "python"))]
    }
    _, found = scanner_findings(_report(tmp_path, report))
    assert [f.fixed for f in found] == [fixed]


def test_a_duplicate_keeps_a_fix_and_the_worst_graded_severity(tmp_path: Path) -> None:
    artifact = ("libssl3", "3.0.15-1~deb12u1", "deb")
    report = {
        "matches": [
            _grype_match("CVE-2024-13176", "Low", {"state": "unknown"}, artifact, "openssl"),
            _grype_match(
                "CVE-2024-13176",
                "Medium",
                {"versions": ["3.0.16-1~deb12u1"], "state": "fixed"},
                artifact,
                "openssl",
            ),
            _grype_match("CVE-2024-13176", "Unknown", {"state": "unknown"}, artifact, "openssl"),
        ]
    }
    _, found = scanner_findings(_report(tmp_path, report))
    assert [(f.id, f.fixed, f.severity) for f in found] == [
        ("CVE-2024-13176", "3.0.16-1~deb12u1", Severity.MEDIUM)
    ]


def test_trivy_results_of_other_kinds_are_skipped(tmp_path: Path) -> None:
    node = _trivy_vuln("CVE-2024-4068", "braces", "3.0.2", FixedVersion="3.0.3", Severity="HIGH")
    secret = {"Target": "/root/.ssh/id_rsa", "Class": "secret", "Secrets": [{"RuleID": "key"}]}
    report = {
        **TRIVY,
        "Results": [
            {
                "Target": "yarn.lock",
                "Class": "lang-pkgs",
                "Type": "yarn",
                "Vulnerabilities": [node],
            },
            secret,
        ],
    }
    assert scanner_findings(_report(tmp_path, report)) == (FindingOrigin.TRIVY, ())


def test_a_clean_image_s_reports_have_no_findings(tmp_path: Path) -> None:
    """Trivy leaves `Results` out where it found no targets; Grype writes `matches: []`."""
    trivy = {k: v for k, v in TRIVY.items() if k != "Results"}
    assert scanner_findings(_report(tmp_path, trivy, "t.json")) == (FindingOrigin.TRIVY, ())
    grype = {**GRYPE, "matches": []}
    assert scanner_findings(_report(tmp_path, grype, "g.json")) == (FindingOrigin.GRYPE, ())


def test_malformed_json_is_located_at_its_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "grype.json"
    path.write_text('{\n  "matches": [\n    {"vulnerability": }\n  ]\n}\n')
    with pytest.raises(ValidationError) as caught:
        scanner_findings(path)
    assert [p.format() for p in caught.value.problems] == [
        f"{path}:3:23: not JSON: Expecting value\n"
        "    hint: give the JSON report of `trivy image --format json` or of `grype -o json`"
    ]
    assert caught.value.outcome == "nothing was audited"


def test_a_report_that_is_not_utf8_is_located(tmp_path: Path) -> None:
    path = tmp_path / "trivy.json"
    path.write_bytes(b'{"Results": [\n  {"Target": "caf\xe9"}]}')
    with pytest.raises(ValidationError) as caught:
        scanner_findings(path)
    assert [(p.line, p.col, p.message) for p in caught.value.problems] == [
        (2, 18, "not UTF-8 text")
    ]


@pytest.mark.parametrize(
    "document",
    [
        {"SchemaVersion": 2, "Findings": []},  # neither scanner's keys
        {"vulnerabilities": [], "metadata": {}},  # another tool's report
        [{"matches": []}],  # not an object at all
    ],
)
def test_json_of_neither_scanner_is_bad_input_naming_both(tmp_path: Path, document: object) -> None:
    path = _report(tmp_path, document)
    with pytest.raises(InputError) as caught:
        scanner_findings(path)
    assert caught.value.message == f"{path}: neither a Trivy nor a Grype JSON report"
    assert "trivy image --format json" in caught.value.hint
    assert "grype -o json" in caught.value.hint


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({**TRIVY, "Results": {"Target": "Python"}}, "$.Results is an object, not a list"),
        (
            {
                **TRIVY,
                "Results": [
                    {
                        "Class": "os-pkgs",
                        "Vulnerabilities": [{"VulnerabilityID": "CVE-1", "InstalledVersion": "1"}],
                    }
                ],
            },
            "$.Results[0].Vulnerabilities[0].PkgName is missing or empty",
        ),
        (
            {**TRIVY, "Results": [{"Class": "os-pkgs", "Vulnerabilities": [["CVE-1"]]}]},
            "$.Results[0].Vulnerabilities[0] is a list, not an object",
        ),
        ({"matches": [{"vulnerability": {"id": "CVE-1"}}]}, "$.matches[0].artifact is missing"),
        (
            {"matches": [{**GRYPE["matches"][0], "vulnerability": {"id": 7}}]},
            "$.matches[0].vulnerability.id is a number, not a string",
        ),
    ],
)
def test_a_report_of_the_wrong_shape_names_the_json_path(
    tmp_path: Path, document: object, message: str
) -> None:
    path = _report(tmp_path, document)
    with pytest.raises(ValidationError) as caught:
        scanner_findings(path)
    assert [f"{p.file}:{p.line}:{p.col}: {p.message}" for p in caught.value.problems] == [
        f"{path}:1:1: {message}"
    ]


def test_a_report_that_cannot_be_read_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        scanner_findings(tmp_path / "missing.json")
    assert caught.value.message.startswith(f"{tmp_path / 'missing.json'}: cannot read the report")
