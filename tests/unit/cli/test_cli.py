"""The command line as a user meets it: exit codes, stdout data, stderr messages."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagekit import __version__
from imagekit.cli import app
from imagekit.cli.line import help_text
from imagekit.matrix.load import load_matrix

ROOT = Path(__file__).resolve().parents[3]
MATRIX = ROOT / "matrix.yaml"
runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


BAD_MATRIX = """\
schema_version: 1
repository: ghcr.io/acme/pytorch
bases: {ubuntu-24.04: "ubuntu:24.04"}
defaults: {os: ubuntu-24.04, python: "3.12"}
flavours:
  slim: {size_budget_bytes: 1000}
  full: {size_budget_bytes: 2000}
releases:
  - torch: "2.8.0"
    cuda: ["11.8"]
latest: {torch: "2.8.0", cuda: "12.8"}
"""


def test_version_is_printed() -> None:
    code, out, _ = invoke("--version")
    assert code == 0
    assert out.strip() == f"imagekit {__version__}"


def test_python_dash_m_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "imagekit", "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0
    assert done.stdout.strip() == f"imagekit {__version__}"


def test_check_passes_on_the_default_matrix() -> None:
    code, _, err = invoke("check", "--matrix", str(MATRIX))
    assert code == 0, err
    assert "Dockerfiles lint clean" in err


def test_check_reports_bad_input_with_location_and_exit_code_2(tmp_path: Path) -> None:
    bad = tmp_path / "matrix.yaml"
    bad.write_text(BAD_MATRIX)
    code, out, err = invoke("check", "--matrix", str(bad))
    assert code == 2
    assert out == ""
    assert f"{bad}:10:12: torch 2.8.0 has no CUDA 11.8 build; it has 12.6, 12.8, 12.9" in err
    assert "Traceback" not in err


def test_debug_adds_the_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "matrix.yaml"
    bad.write_text(BAD_MATRIX)
    result = subprocess.run(
        [sys.executable, "-m", "imagekit", "--debug", "check", "--matrix", str(bad)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "Traceback" in result.stderr


def test_a_missing_matrix_file_says_how_to_point_at_one(tmp_path: Path) -> None:
    code, _, err = invoke("matrix", "--matrix", str(tmp_path / "nope.yaml"))
    assert code == 2
    assert "cannot read matrix" in err and "--matrix PATH" in err


def test_matrix_github_format_lists_every_cell_and_flavour() -> None:
    code, out, _ = invoke("matrix", "--matrix", str(MATRIX), "--format", "github")
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"include"}
    loaded = load_matrix(MATRIX)
    assert [row["image"] for row in data["include"]] == [p.name for p in loaded.plans]
    assert {(row["cell"], row["flavour"]) for row in data["include"]} == {
        (p.cell.id, p.flavour) for p in loaded.plans
    }
    assert "\n" not in out.strip()  # one line, as $GITHUB_OUTPUT wants it


def test_matrix_selection_by_only_and_flavour() -> None:
    code, out, _ = invoke(
        "matrix",
        "--matrix",
        str(MATRIX),
        "--only",
        "2.8.0",
        "--flavour",
        "slim",
        "--format",
        "json",
    )
    assert code == 0
    rows = json.loads(out)
    assert {r["image"] for r in rows} == {
        "2.8.0-cu126-py3.12-slim",
        "2.8.0-cu128-py3.12-slim",
        "2.8.0-cu129-py3.12-slim",
    }


def test_a_selection_that_matches_nothing_lists_the_cells() -> None:
    code, _, err = invoke("matrix", "--matrix", str(MATRIX), "--only", "9.9.9")
    assert code == 2
    assert "no image matches" in err and "2.8.0-cu128-py3.12" in err


def test_matrix_table_shows_tags_and_aliases() -> None:
    code, out, _ = invoke("matrix", "--matrix", str(MATRIX), "--only", "2.15.0-cu132-py3.12")
    assert code == 0
    assert "2.15.0-cuda13.2-cudnn9-py3.12-full (+2.15-cuda13.2-full, latest-full, latest)" in out


def test_render_writes_one_folder_per_image(tmp_path: Path) -> None:
    code, out, err = invoke(
        "render",
        "--matrix",
        str(MATRIX),
        "--out",
        str(tmp_path),
        "--only",
        "2.15.0",
        "--no-ca-cert",
    )
    assert code == 0, err
    folders = sorted(p.name for p in tmp_path.iterdir())
    assert folders == sorted(
        [
            "2.15.0-cu132-py3.12-slim",
            "2.15.0-cu132-py3.12-full",
            "2.15.0-cpu-py3.12-slim",
            "2.15.0-cpu-py3.12-full",
            "2.15.0-jammy-cu132-py3.11-slim",
        ]
    )
    for folder in tmp_path.iterdir():
        assert (folder / "Dockerfile").is_file()
        plan = json.loads((folder / "imagekit-plan.json").read_text())
        assert plan["input_hash"].startswith("sha256:")
    assert len(out.splitlines()) == 5


def test_render_check_fails_with_exit_1_when_the_folder_differs(tmp_path: Path) -> None:
    args = ["render", "--matrix", str(MATRIX), "--out", str(tmp_path), "--only", "2.15.0-cpu"]
    assert invoke(*args, "--no-ca-cert")[0] == 0
    assert invoke(*args, "--no-ca-cert", "--check")[0] == 0
    dockerfile = tmp_path / "2.15.0-cpu-py3.12-slim" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "# edited\n")
    code, _, err = invoke(*args, "--no-ca-cert", "--check")
    assert code == 1
    assert "+# edited" not in err and "-# edited" in err


def test_golden_check_through_the_cli_passes() -> None:
    golden = ROOT / "tests" / "golden"
    code, _, err = invoke(
        "render",
        "--matrix",
        str(golden / "matrix.yaml"),
        "--out",
        str(golden / "docker"),
        "--no-ca-cert",
        "--check",
    )
    assert code == 0, err


def test_render_takes_the_ca_bundle_from_pip_cert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = tmp_path / "proxy-ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("PIP_CERT", str(ca))
    out = tmp_path / "out"
    code, _, err = invoke(
        "render", "--matrix", str(MATRIX), "--out", str(out), "--only", "2.15.0-cpu-py3.12-slim"
    )
    assert code == 0, err
    folder = out / "2.15.0-cpu-py3.12-slim"
    assert (folder / "ca-bundle.crt").read_text() == ca.read_text()
    dockerfile = (folder / "Dockerfile").read_text()
    assert re.search(r"(?m)^COPY .* ca-bundle\.crt /tmp/imagekit/$", dockerfile)


def test_compat_shows_one_release() -> None:
    code, out, _ = invoke("compat", "--torch", "2.8.0")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["TORCH", "PYTHON", "GLIBC>=", "CUDA"]
    assert [line.split()[3] for line in lines[1:]] == ["12.6", "12.8", "12.9*", "cpu"]


def test_compat_json_holds_every_release() -> None:
    code, out, _ = invoke("compat", "--json")
    assert code == 0
    data = json.loads(out)
    assert "2.14.1" in data and data["2.14.1"]["variants"]["13.0"]["cudnn"] == "9.24.0.43"


def test_compat_explain_describes_a_valid_cell() -> None:
    code, out, _ = invoke(
        "compat", "explain", "--torch", "2.14.1", "--cuda", "13.0", "--python", "3.12"
    )
    assert code == 0
    assert "min driver         580.65.06" in out
    assert "index url          https://download.pytorch.org/whl/cu130" in out


def test_compat_explain_says_why_a_cell_cannot_be_built() -> None:
    code, _, err = invoke("compat", "explain", "--torch", "2.8.0", "--cuda", "11.8")
    assert code == 2
    assert "torch 2.8.0 has no CUDA 11.8 build; it has 12.6, 12.8, 12.9 (and cpu)" in err


def test_schema_command_prints_the_committed_schema() -> None:
    code, out, _ = invoke("schema")
    assert code == 0
    committed = (ROOT / "imagekit" / "data" / "matrix.schema.json").read_text()
    assert json.loads(out) == json.loads(committed)


def test_flags_show_no_value_placeholder_and_a_value_given_to_one_is_named() -> None:
    result = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "120"})
    # Without the styling a CI runner's environment asks rich for (GitHub Actions, act).
    plain = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout)
    line = next(x for x in plain.splitlines() if "--jupyter" in x)
    assert "<bool>" not in line and "JupyterLab" in line
    given = runner.invoke(app, ["run", "some/image", "--jupyter", "true"])
    assert given.exit_code == 2
    assert "--jupyter takes no value ('true' was read as a command to run)" in given.stderr
    assert "drop 'true'" in given.stderr


def test_every_command_in_the_list_has_its_summary_as_one_sentence_unbroken() -> None:
    """The commands list rewraps each command's first paragraph to the terminal; a line break
    kept inside it cut the sentence off mid-way (schema, doctor)."""
    import typer.main

    group = typer.main.get_command(app)
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        assert "\n" not in (command.help or "").partition("\n\n")[0], name
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "80"})
    plain = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout)
    assert "the verify attestation's predicate), for editors and CI." in plain
    assert help_text("One\n  two.\n\nRest\njoined.") == "One two.\n\nRest joined."


def test_a_missing_key_file_is_refused_before_anything_starts(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pub"
    result = runner.invoke(app, ["run", "img:1", "--ssh", "--authorized-keys", str(missing)])
    assert result.exit_code == 2
    assert f"--authorized-keys {missing} is not a file" in result.stderr
    assert "starting" not in result.stderr and "Traceback" not in result.output
