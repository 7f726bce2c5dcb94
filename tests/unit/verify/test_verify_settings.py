"""`imagekit verify`'s request reaches the settings VerifyRun works from, field by field: the
copy where an option could be dropped unnoticed (as `publish --candidate` once was)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from imagekit.cli.verify import step_summary_file
from imagekit.kernel.runtime import GpuChoice
from imagekit.matrix.selection import Selection
from imagekit.verify.requests import VerifyCommand
from imagekit.verify.settings import VerifySettings


def test_every_verify_option_reaches_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    request = VerifyCommand(
        Selection(),
        gpus=GpuChoice.ALL,
        probes=("env", "autograd"),
        timeout_s=12.5,
        shm_bytes=3 << 30,
        structure=False,
        nodes=2,
    )
    settings = VerifySettings.of(request, tmp_path / "probes", step_summary_file())
    assert settings.probes_dir == tmp_path / "probes"
    assert settings.step_summary == tmp_path / "summary.md"
    for field in dataclasses.fields(settings):
        if field.name in ("probes_dir", "step_summary"):
            continue
        assert getattr(settings, field.name) == getattr(request, field.name), field.name
        assert getattr(settings, field.name) != field.default, f"{field.name} left at default"


def test_without_github_s_step_summary_there_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    settings = VerifySettings.of(VerifyCommand(Selection()), Path("probes"), step_summary_file())
    assert settings.step_summary is None
