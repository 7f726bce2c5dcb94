"""`imagekit verify`'s settings: the options nested in its request, taken by VerifyRun as they
are (no copy in between for an option to be dropped from, as `publish --candidate` once was),
and what the command finds around them: the probes folder and GitHub's step summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.errors import InputError
from imagekit.resources import probes_dir
from imagekit.verify.requests import VerifySettings
from imagekit.verify.settings import check_probes_folder
from imagekit.verify.summary import step_summary_file


def test_the_probes_folder_is_probes_dir_s_else_imagekit_s(tmp_path: Path) -> None:
    assert VerifySettings().probes_folder == probes_dir()
    assert VerifySettings(probes_dir=tmp_path).probes_folder == tmp_path
    check_probes_folder(probes_dir())
    with pytest.raises(InputError, match=f"--probes-dir {tmp_path} has no _runner.py"):
        check_probes_folder(tmp_path)


def test_the_settings_check_their_options() -> None:
    with pytest.raises(InputError, match="--shm-size 0 is not a size in bytes"):
        VerifySettings(shm_bytes=0)
    with pytest.raises(InputError, match="--timeout-s 0 is not a time limit"):
        VerifySettings(timeout_s=0)


def test_the_step_summary_is_github_s_when_it_gives_one(tmp_path: Path) -> None:
    given = {"GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}
    assert step_summary_file(given) == tmp_path / "summary.md"
    assert step_summary_file({"GITHUB_STEP_SUMMARY": ""}) is None
    assert step_summary_file({}) is None
