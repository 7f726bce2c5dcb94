"""Opening a verify run: bad input is reported before any run folder is made. An image the
engine does not have was recorded as "not verified" in a folder of its own, which left a run
folder with no image in it under results/ for every mistyped name."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagekit.adapters import engine as engine_adapter
from imagekit.adapters.verifying import open_verify_run
from imagekit.cli import app
from imagekit.cli import verify as verify_cli
from imagekit.errors import ExitCode, InputError
from imagekit.verify.settings import Target, check_present
from tests.fakes import FakeEngine, image_id

HERE, GONE = "local/pytorch:here", "local/pytorch:gone"


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    """The engine the CLI opens: one that holds HERE only."""
    fake = FakeEngine()
    fake.add(HERE, image_id(HERE))
    monkeypatch.setattr(engine_adapter, "open_engine", lambda: fake)
    monkeypatch.setattr(verify_cli, "note_leftovers", lambda engine: None)
    return fake


def test_a_run_with_nothing_the_engine_has_is_bad_input(engine: FakeEngine) -> None:
    with pytest.raises(InputError, match=f"image {GONE} is not in the engine") as one:
        check_present([Target("gone", GONE)], engine)
    assert "build it first" in one.value.hint
    with pytest.raises(InputError, match="none of the 2 images is in the engine: a:1, b:1"):
        check_present([Target("a", "a:1"), Target("b", "b:1")], engine)
    # One image there is a run: the missing one is recorded as not verified, as before.
    check_present([Target("gone", GONE), Target("here", HERE)], engine)


def test_no_run_folder_is_made_for_an_image_the_engine_lacks(
    engine: FakeEngine, tmp_path: Path
) -> None:
    results = tmp_path / "results"
    with pytest.raises(InputError):
        open_verify_run(results, [GONE], [partial(check_present, [Target("gone", GONE)])])
    assert not results.exists() or list(results.iterdir()) == []

    both = [Target("gone", GONE), Target("here", HERE)]
    _, run = open_verify_run(results, [GONE, HERE], [partial(check_present, both)])
    assert list(results.iterdir()) == [run.root] and (run.root / "run.json").is_file()


def test_verify_of_a_missing_image_exits_2_and_leaves_no_run_folder(
    engine: FakeEngine, tmp_path: Path
) -> None:
    results = tmp_path / "results"
    result = CliRunner().invoke(app, ["verify", GONE, "--results", str(results)])

    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert f"image {GONE} is not in the engine" in result.output
    assert not results.exists() or list(results.iterdir()) == []
