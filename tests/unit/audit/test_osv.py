"""Python advisories from an OSV export given offline: records shaped as osv.dev's PyPI export
writes them (GHSA and PYSEC records), read from a zip or a folder, matched against an image's
distributions by the OSV schema's rules."""

from __future__ import annotations

import json
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagekit.audit.findings import Finding
from imagekit.audit.osv import Advisory, python_findings, read_osv
from imagekit.errors import InputError, ValidationError
from imagekit.kernel.vocabulary import Ecosystem, FindingOrigin, Severity

SETUPTOOLS: dict[
    str, Any
] = {  # GHSA-style: a range from the beginning, fixed in 70.0.0, a CVE alias
    "schema_version": "1.4.0",
    "id": "GHSA-cx63-2mw6-8hw5",
    "modified": "2024-07-15T21:45:41Z",
    "published": "2024-07-15T03:30:48Z",
    "aliases": ["CVE-2024-6345"],
    "summary": "setuptools vulnerable to Command Injection via package URL",
    "affected": [
        {
            "package": {"ecosystem": "PyPI", "name": "setuptools", "purl": "pkg:pypi/setuptools"},
            "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "70.0.0"}]}],
        }
    ],
    "severity": [{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:H/PR:N/UI:R/S:U/C:H/I:H/A:H"}],
    "database_specific": {"cwe_ids": ["CWE-94"], "severity": "HIGH", "github_reviewed": True},
}
PYYAML: dict[
    str, Any
] = {  # PYSEC-style: a GIT range (commits, not releases) and the versions it expands to
    "id": "PYSEC-2020-96",
    "modified": "2021-01-20T17:15:00Z",
    "aliases": ["CVE-2020-1747", "GHSA-6757-jp84-gxfx"],
    "affected": [
        {
            "package": {"ecosystem": "PyPI", "name": "PyYAML"},
            "ranges": [
                {
                    "type": "GIT",
                    "repo": "https://github.com/yaml/pyyaml",
                    "events": [
                        {"introduced": "0"},
                        {"fixed": "5a3f2e8a0c0cf6ba7a7fbf6c7b49c9a94ed0fee2"},
                    ],
                }
            ],
            "versions": ["5.1", "5.1.1", "5.1.2", "5.2", "5.3"],
        }
    ],
}
URLLIB3: dict[str, Any] = {  # two ranges, one per branch; GHSA's MODERATE
    "id": "GHSA-v845-jxx5-vc9f",
    "aliases": ["CVE-2023-43804"],
    "affected": [
        {
            "package": {"ecosystem": "PyPI", "name": "urllib3"},
            "ranges": [
                {
                    "type": "ECOSYSTEM",
                    "events": [
                        {"introduced": "0"},
                        {"fixed": "1.26.17"},
                        {"introduced": "2.0.0"},
                        {"fixed": "2.0.6"},
                    ],
                }
            ],
        }
    ],
    "database_specific": {"severity": "MODERATE"},
}
PY: dict[str, Any] = {  # no fix: affected up to the last release, graded only by a CVSS vector
    "id": "PYSEC-2022-42969",
    "aliases": ["CVE-2022-42969"],
    "affected": [
        {
            "package": {"ecosystem": "PyPI", "name": "py"},
            "ranges": [
                {"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"last_affected": "1.11.0"}]}
            ],
        }
    ],
    "severity": [{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H"}],
}
WITHDRAWN: dict[str, Any] = {
    "id": "GHSA-q2x7-8rv6-6q7h",
    "withdrawn": "2024-03-01T00:00:00Z",
    "affected": [
        {
            "package": {"ecosystem": "PyPI", "name": "jinja2"},
            "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "9.0"}]}],
        }
    ],
    "database_specific": {"severity": "CRITICAL"},
}
RECORDS = (SETUPTOOLS, PYYAML, URLLIB3, PY, WITHDRAWN)


def _folder(tmp_path: Path, *records: dict[str, Any]) -> Path:
    folder = tmp_path / "osv"
    for record in records:
        (folder / "PyPI").mkdir(parents=True, exist_ok=True)
        (folder / "PyPI" / f"{record['id']}.json").write_text(json.dumps(record, indent=2))
    return folder


def _zip(tmp_path: Path, members: dict[str, str | bytes]) -> Path:
    path = tmp_path / "all.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return path


def _advisories(tmp_path: Path, *records: dict[str, Any]) -> tuple[Advisory, ...]:
    return read_osv(_folder(tmp_path, *records))


def _finding(ident: str, package: str, installed: str, fixed: str, severity: Severity) -> Finding:
    return Finding(ident, package, installed, fixed, severity, FindingOrigin.OSV, Ecosystem.PYTHON)


def _located(caught: pytest.ExceptionInfo[ValidationError]) -> list[str]:
    return [f"{p.file}:{p.line}:{p.col}: {p.message}" for p in caught.value.problems]


INSTALLED = {
    "setuptools": "69.5.1",
    "PyYAML": "5.3",
    "urllib3": "1.26.5",
    "py": "1.11.0",
    "Jinja2": "3.1.2",
    "torch": "2.5.1",
}


def test_an_image_s_distributions_are_matched_by_each_rule(tmp_path: Path) -> None:
    found = python_findings(_advisories(tmp_path, *RECORDS), INSTALLED)
    assert found == (  # by (package, id), as text: "PyYAML" before "py"
        _finding("PYSEC-2020-96", "PyYAML", "5.3", "", Severity.UNKNOWN),  # a listed version
        _finding("PYSEC-2022-42969", "py", "1.11.0", "", Severity.UNKNOWN),  # a CVSS vector only
        _finding("GHSA-cx63-2mw6-8hw5", "setuptools", "69.5.1", "70.0.0", Severity.HIGH),
        _finding("GHSA-v845-jxx5-vc9f", "urllib3", "1.26.5", "1.26.17", Severity.MEDIUM),
    )  # Jinja2's advisory is withdrawn; torch has none


def test_findings_sort_by_package_then_id(tmp_path: Path) -> None:
    second = {**SETUPTOOLS, "id": "GHSA-5rjg-fvgr-3xxf", "database_specific": {}}
    found = python_findings(_advisories(tmp_path, SETUPTOOLS, second, URLLIB3), INSTALLED)
    assert [(f.package, f.id) for f in found] == [
        ("setuptools", "GHSA-5rjg-fvgr-3xxf"),
        ("setuptools", "GHSA-cx63-2mw6-8hw5"),
        ("urllib3", "GHSA-v845-jxx5-vc9f"),
    ]


@pytest.mark.parametrize(
    ("installed", "fixed"),
    [
        ("69.5.1", "70.0.0"),
        ("9.0", "70.0.0"),  # as text, "9.0" > "70.0.0"; as versions, it is older
        ("70.0.0rc1", "70.0.0"),  # a release candidate comes before its release
        ("70.0.0", None),  # the fixed version itself is not affected
        ("75.1.0", None),
    ],
)
def test_a_range_from_the_beginning_to_a_fix(
    tmp_path: Path, installed: str, fixed: str | None
) -> None:
    found = python_findings(_advisories(tmp_path, SETUPTOOLS), {"setuptools": installed})
    assert [f.fixed for f in found] == ([] if fixed is None else [fixed])


@pytest.mark.parametrize(
    ("installed", "fixed"),
    [
        ("1.26.5", "1.26.17"),  # the lowest fix above it, not 2.0.6
        ("1.26.17", None),
        ("1.26.20", None),  # between the two intervals
        ("2.0.0", "2.0.6"),  # `introduced` includes its version
        ("2.0.5", "2.0.6"),
        ("2.0.6", None),
        ("2.2.3", None),
    ],
)
def test_a_range_of_two_intervals(tmp_path: Path, installed: str, fixed: str | None) -> None:
    found = python_findings(_advisories(tmp_path, URLLIB3), {"urllib3": installed})
    assert [f.fixed for f in found] == ([] if fixed is None else [fixed])


def test_events_are_evaluated_sorted_by_version(tmp_path: Path) -> None:
    """The OSV algorithm sorts a range's events by version before walking them."""
    shuffled = {
        **URLLIB3,
        "affected": [
            {
                "package": {"ecosystem": "PyPI", "name": "urllib3"},
                "ranges": [
                    {
                        "type": "ECOSYSTEM",
                        "events": [
                            {"fixed": "2.0.6"},
                            {"introduced": "2.0.0"},
                            {"fixed": "1.26.17"},
                            {"introduced": "0"},
                        ],
                    }
                ],
            }
        ],
    }
    advisories = _advisories(tmp_path, shuffled)
    assert [f.fixed for f in python_findings(advisories, {"urllib3": "2.0.3"})] == ["2.0.6"]
    assert python_findings(advisories, {"urllib3": "1.26.18"}) == ()


@pytest.mark.parametrize(("installed", "affected"), [("1.11.0", True), ("1.11.1", False)])
def test_last_affected_includes_its_version(tmp_path: Path, installed: str, affected: bool) -> None:
    found = python_findings(_advisories(tmp_path, PY), {"py": installed})
    assert [f.id for f in found] == (["PYSEC-2022-42969"] if affected else [])


def test_a_limit_bounds_the_whole_range(tmp_path: Path) -> None:
    limited = {
        "id": "GHSA-aaaa-bbbb-cccc",
        "affected": [
            {
                "package": {"ecosystem": "PyPI", "name": "pillow"},
                "ranges": [
                    {"type": "SEMVER", "events": [{"introduced": "0"}, {"limit": "10.0.0"}]},
                    {"type": "ECOSYSTEM", "events": [{"introduced": "11.0.0"}, {"limit": "*"}]},
                ],
            }
        ],
    }
    advisories = _advisories(tmp_path, limited)
    for installed, affected in [("9.5.0", True), ("10.0.0", False), ("11.2.1", True)]:
        found = python_findings(advisories, {"Pillow": installed})
        assert [(f.package, f.fixed) for f in found] == ([("Pillow", "")] if affected else [])


def test_listed_versions_match_exactly_or_as_equal_versions(tmp_path: Path) -> None:
    advisories = _advisories(tmp_path, PYYAML)
    assert [f.id for f in python_findings(advisories, {"pyyaml": "5.1.2"})] == ["PYSEC-2020-96"]
    assert [f.id for f in python_findings(advisories, {"PyYAML": "5.3.0"})] == ["PYSEC-2020-96"]
    assert python_findings(advisories, {"PyYAML": "5.3.1"}) == ()
    assert python_findings(advisories, {"PyYAML": "5.4"}) == ()  # GIT ranges compare nothing


def test_names_compare_as_pep_503_normalizes_them(tmp_path: Path) -> None:
    record = {
        "id": "GHSA-w596-4wvx-j9j6",
        "affected": [
            {
                "package": {"ecosystem": "PyPI", "name": "typing-extensions"},
                "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}]}],
            }
        ],
    }
    found = python_findings(_advisories(tmp_path, record), {"Typing_Extensions": "4.12.2"})
    assert found == (
        _finding("GHSA-w596-4wvx-j9j6", "Typing_Extensions", "4.12.2", "", Severity.UNKNOWN),
    )


def test_withdrawn_advisories_and_other_ecosystems_match_nothing(tmp_path: Path) -> None:
    npm = {
        **SETUPTOOLS,
        "id": "GHSA-npm0-0000-0000",
        "affected": [
            {**SETUPTOOLS["affected"][0], "package": {"ecosystem": "npm", "name": "setuptools"}}
        ],
    }
    found = python_findings(_advisories(tmp_path, WITHDRAWN, npm), INSTALLED)
    assert found == ()


def test_a_bound_that_is_no_pep_440_version_is_left_out_of_its_range(tmp_path: Path) -> None:
    record = {
        "id": "PYSEC-2017-1",
        "affected": [
            {
                "package": {"ecosystem": "PyPI", "name": "paramiko"},
                "ranges": [
                    {
                        "type": "ECOSYSTEM",
                        "events": [
                            {"introduced": "1.0"},
                            {"fixed": "1.17.6-r2 final"},  # not PEP 440: skipped
                            {"fixed": "2.0.9"},
                        ],
                    }
                ],
            }
        ],
    }
    advisories = _advisories(tmp_path, record)
    assert [f.fixed for f in python_findings(advisories, {"paramiko": "1.18.0"})] == ["2.0.9"]
    assert python_findings(advisories, {"paramiko": "2.0.9"}) == ()
    assert python_findings(advisories, {"paramiko": "0.9"}) == ()
    # An installed version that is no PEP 440 version matches only a listed one, and is no crash.
    assert python_findings(advisories, {"paramiko": "custom build"}) == ()


def test_two_entries_for_one_package_make_one_finding_with_the_lower_fix(
    tmp_path: Path,
) -> None:
    record = {
        "id": "GHSA-34jh-p97f-mpxf",
        "affected": [
            {
                "package": {"ecosystem": "PyPI", "name": "urllib3"},
                "ranges": [
                    {"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "2.0.7"}]}
                ],
            },
            {
                "package": {"ecosystem": "PyPI", "name": "urllib3"},
                "ranges": [
                    {"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "1.26.18"}]}
                ],
            },
        ],
        "database_specific": {"severity": "LOW"},
    }
    expected = (_finding("GHSA-34jh-p97f-mpxf", "urllib3", "1.26.5", "1.26.18", Severity.LOW),)
    advisories = _advisories(tmp_path, record)
    assert python_findings(advisories, {"urllib3": "1.26.5"}) == expected
    reversed_ = replace(advisories[0], affected=advisories[0].affected[::-1])
    assert python_findings([reversed_], {"urllib3": "1.26.5"}) == expected  # either order


def test_a_zip_export_reads_as_its_folder_does(tmp_path: Path) -> None:
    members: dict[str, str | bytes] = {f"{r['id']}.json": json.dumps(r) for r in RECORDS}
    from_zip = read_osv(_zip(tmp_path, members))
    from_folder = read_osv(_folder(tmp_path, *RECORDS))
    assert sorted(a.id for a in from_zip) == sorted(r["id"] for r in RECORDS)
    assert set(from_zip) == set(from_folder)
    setuptools = next(a for a in from_zip if a.id == "GHSA-cx63-2mw6-8hw5")
    assert (setuptools.severity, setuptools.withdrawn) == ("HIGH", "")
    assert setuptools.affected[0].name == "setuptools"
    assert setuptools.affected[0].ranges[0].events == (("introduced", "0"), ("fixed", "70.0.0"))


def test_malformed_json_in_a_folder_is_located_at_its_line_and_column(tmp_path: Path) -> None:
    folder = _folder(tmp_path, SETUPTOOLS)
    bad = folder / "PyPI" / "GHSA-bad0-0000-0000.json"
    bad.write_text('{\n  "id": "GHSA-bad0-0000-0000",\n  "affected": [\n}\n')
    with pytest.raises(ValidationError) as caught:
        read_osv(folder)
    assert _located(caught) == [f"{bad}:4:1: not JSON: Expecting value"]
    assert caught.value.outcome == "nothing was audited"


def test_malformed_json_in_a_zip_names_the_member(tmp_path: Path) -> None:
    path = _zip(
        tmp_path,
        {
            "GHSA-cx63-2mw6-8hw5.json": json.dumps(SETUPTOOLS),
            "GHSA-bad0-0000-0000.json": '{"id": "GHSA-bad0-0000-0000",\n "aliases": ["CVE-1"',
            "PYSEC-bad.json": b'{"id": "PYSEC-\xff"}',  # not UTF-8
        },
    )
    with pytest.raises(ValidationError) as caught:
        read_osv(path)
    assert _located(caught) == [
        f"{path}:GHSA-bad0-0000-0000.json:2:21: not JSON: Expecting ',' delimiter",
        f"{path}:PYSEC-bad.json:1:15: not UTF-8 text",
    ]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([SETUPTOOLS], "$ is a list, not an object"),
        ({"summary": "no id"}, "$.id is missing: every OSV record has one (GHSA-…, PYSEC-…)"),
        (
            {**SETUPTOOLS, "affected": {"package": "setuptools"}},
            "$.affected is an object, not a list",
        ),
        (
            {**URLLIB3, "affected": [{"package": {"name": "urllib3"}, "ranges": [{"events": {}}]}]},
            "$.affected[0].ranges[0].events is an object, not a list",
        ),
        (
            {**URLLIB3, "affected": [{"ranges": [{"events": [{"fixed": 2}]}]}]},
            "$.affected[0].ranges[0].events[0].fixed is a number, not a string",
        ),
        (
            {**PYYAML, "affected": [{"versions": ["5.3", None]}]},
            "$.affected[0].versions[1] is null, not a string",
        ),
    ],
)
def test_a_record_of_the_wrong_shape_names_the_json_path(
    tmp_path: Path, document: object, message: str
) -> None:
    folder = tmp_path / "osv"
    folder.mkdir()
    (folder / "GHSA-0000.json").write_text(json.dumps(document))
    with pytest.raises(ValidationError) as caught:
        read_osv(folder)
    assert _located(caught) == [f"{folder / 'GHSA-0000.json'}:1:1: {message}"]


def test_every_bad_record_is_reported_at_once(tmp_path: Path) -> None:
    folder = _folder(tmp_path, SETUPTOOLS)
    (folder / "a.json").write_text("[]")
    (folder / "b.json").write_text("{")
    with pytest.raises(ValidationError) as caught:
        read_osv(folder)
    assert _located(caught) == [
        f"{folder / 'a.json'}:1:1: $ is a list, not an object",
        f"{folder / 'b.json'}:1:2: not JSON: Expecting property name enclosed in double quotes",
    ]


def test_a_path_that_is_no_export_is_bad_input_naming_the_export(tmp_path: Path) -> None:
    record = tmp_path / "GHSA-cx63-2mw6-8hw5.json"
    record.write_text(json.dumps(SETUPTOOLS))
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        (record, "is neither a zip nor a folder"),
        (tmp_path / "missing.zip", "does not exist"),
        (empty, "holds no OSV records (*.json)"),
    ]
    for path, what in cases:
        with pytest.raises(InputError) as caught:
            read_osv(path)
        assert caught.value.message == f"{path}: {what}"
        assert "all.zip" in caught.value.hint
