"""`imagekit audit`'s bad input: exit 2 with the file and what to do, before any engine is asked
(DOCKER_HOST names a socket nobody listens on: asking it would be exit 3, not 2)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagekit.cli import app

ROOT = Path(__file__).resolve().parents[3]
CPU = ROOT / "examples" / "cpu.yaml"


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nobody.sock")


def audit(tmp_path: Path, *args: str, matrix: Path = CPU) -> tuple[int, str]:
    result = CliRunner().invoke(
        app, ["audit", "--matrix", str(matrix), "--results", str(tmp_path / "results"), *args]
    )
    return result.exit_code, result.stderr


def with_security(tmp_path: Path, section: str) -> Path:
    """The CPU example with a `security:` section."""
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(CPU.read_text() + "\nsecurity:\n" + section)
    return matrix


def test_an_allowlist_entry_without_a_reason_is_refused_at_its_line(tmp_path: Path) -> None:
    allowlist = tmp_path / "accepted.yaml"
    allowlist.write_text("- id: CVE-2026-1\n  package: zlib1g\n  expires: 2099-01-01\n")
    matrix = with_security(tmp_path, "  allowlist: accepted.yaml\n")
    code, said = audit(tmp_path, matrix=matrix)
    assert code == 2, said
    assert f"{allowlist}:1:3: no reason: say why it is accepted" in said
    assert "nothing was audited" in said and "Traceback" not in said
    assert not (tmp_path / "results").exists()


def test_an_expired_allowlist_entry_is_refused(tmp_path: Path) -> None:
    allowlist = tmp_path / "accepted.yaml"
    allowlist.write_text(
        "- id: CVE-2020-1\n  package: zlib1g\n  reason: old\n  expires: 2021-01-01\n"
    )
    code, said = audit(tmp_path, matrix=with_security(tmp_path, "  allowlist: accepted.yaml\n"))
    assert code == 2 and f"{allowlist}:4:12: CVE-2020-1 in zlib1g expired on 2021-01-01" in said


def test_an_osv_record_that_is_not_json_is_refused_at_its_place(tmp_path: Path) -> None:
    export = tmp_path / "all.zip"
    with zipfile.ZipFile(export, "w") as archive:
        archive.writestr("GHSA-1.json", '{"id": "GHSA-1",\n  "affected": [}')
    code, said = audit(tmp_path, "--osv", str(export))
    assert code == 2, said
    assert f"{export}:GHSA-1.json:2:16: not JSON" in said


def test_a_scanner_report_needs_one_image(tmp_path: Path) -> None:
    report = tmp_path / "trivy.json"
    report.write_text(json.dumps({"SchemaVersion": 2, "ArtifactName": "x", "Results": []}))
    code, said = audit(tmp_path, "--scanner-report", str(report))
    assert code == 2 and "--scanner-report is about one image, and 2 are audited" in said


def test_a_missing_allowlist_names_the_matrix_key(tmp_path: Path) -> None:
    matrix = with_security(tmp_path, "  allowlist: gone.yaml\n")
    code, said = audit(tmp_path, matrix=matrix)
    assert code == 2 and f"{matrix}: security.allowlist gone.yaml: no readable file" in said


def test_an_unknown_threshold_is_refused_at_its_place_in_the_matrix(tmp_path: Path) -> None:
    matrix = with_security(tmp_path, "  refuse: severe\n")
    code, said = audit(tmp_path, matrix=matrix)
    lines = len(CPU.read_text().splitlines())
    assert code == 2 and f"{matrix}:{lines + 3}:11: security.refuse" in said, said
    assert "'high'" in said


def test_with_good_input_the_engine_is_asked_and_its_absence_is_exit_3(tmp_path: Path) -> None:
    code, said = audit(tmp_path)
    assert code == 3, said
    assert "nobody.sock" in said
