"""`imagekit report RUN [RUN2]`: a run is named by its folder, or by its id under --results.

The results folder is made in tmp_path from the recorded runs of tests/data/site-results/, and
the commands run from tmp_path, so that a bare run id is no folder where it is given.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagekit.cli import app

DATA = Path(__file__).resolve().parents[2] / "data" / "site-results"
VERIFY_RUN = "20261202T194342Z-1e59d22c"  # the verify of the CPU demo's slim and full images
BUILD_RUN = "20261202T193904Z-95d5ff56"  # their build, before it


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "ci-results"
    for run in (VERIFY_RUN, BUILD_RUN):
        shutil.copytree(DATA / run, folder / run)
    monkeypatch.chdir(tmp_path)
    return folder


def report(*args: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(app, ["report", *args])
    return done.exit_code, done.stdout, done.stderr


def test_a_run_id_is_found_under_results(results: Path) -> None:
    code, out, err = report(VERIFY_RUN, "--results", str(results))
    assert code == 0, err
    assert out.startswith("2.13.0-cpu-py3.11-full\n")
    assert "2.13.0-cpu-py3.11-slim\n" in out
    assert f"run: {results / VERIFY_RUN}" in err


def test_a_run_folder_is_still_a_path_absolute_or_relative(results: Path) -> None:
    by_id = report(VERIFY_RUN, "--results", str(results))
    assert report(str(results / VERIFY_RUN)) == by_id
    assert report(f"ci-results/{VERIFY_RUN}")[:2] == by_id[:2]


def test_two_run_ids_are_compared(results: Path) -> None:
    code, _, err = report(BUILD_RUN, VERIFY_RUN, "--results", str(results))
    assert code == 0, err
    assert f"changes for the worse from {BUILD_RUN} to {VERIFY_RUN}" in err


def test_an_id_of_no_run_is_one_line_naming_where_it_was_looked_for(results: Path) -> None:
    code, _, err = report("20261202T000000Z-00000000", "--results", str(results))
    assert code == 2
    assert err.startswith(
        f"error: 20261202T000000Z-00000000 is neither a run folder nor the id of a run under "
        f"{results}\n"
    )
    assert "Traceback" not in err
