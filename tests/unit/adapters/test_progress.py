"""PlainView: the lines `imagekit build` prints in CI, and the GitHub Actions log folding."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from imagekit.adapters import progress
from imagekit.adapters.progress import PlainView
from imagekit.events import Event, EventKind

SLIM = "2.13.0-cpu-py3.11-slim"
LOG = ["Step 1/2 : FROM imagekit-base/debian:bookworm", "Successfully built 0123456789ab"]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """A clock the test moves by hand, in place of time.monotonic in imagekit.adapters.progress."""
    fake = SimpleNamespace(now=1000.0)
    fake.monotonic = lambda: fake.now
    monkeypatch.setattr(progress, "time", fake)
    return fake


def shown(github: bool, *sent: Event) -> list[str]:
    out = io.StringIO()
    view = PlainView(out, github=github)
    for event in sent:
        view(event)
    return out.getvalue().splitlines()


def test_started_step_and_finished_are_one_line_each(clock: SimpleNamespace) -> None:
    out = io.StringIO()
    view = PlainView(out, github=False)

    view(Event(EventKind.STARTED, SLIM, "building with sdk"))
    clock.now += 42.4
    view(Event(EventKind.STEP, SLIM, "step 4/5: RUN pip install -r requirements.txt"))
    clock.now += 100
    view(Event(EventKind.FINISHED, SLIM, "built (1.20 GB, 9 layers, 143s)", "built"))

    assert out.getvalue().splitlines() == [
        f"{SLIM}: building with sdk",
        f"{SLIM}: [   42s] step 4/5: RUN pip install -r requirements.txt",
        f"{SLIM}: built (1.20 GB, 9 layers, 143s)",
    ]


def test_step_of_an_image_that_never_started_shows_zero_seconds(clock: SimpleNamespace) -> None:
    assert shown(False, Event(EventKind.STEP, SLIM, "step 1/5: FROM x")) == [
        f"{SLIM}: [    0s] step 1/5: FROM x"
    ]


@pytest.mark.parametrize("kind", ["line", "progress", ""])
def test_other_event_kinds_print_nothing(kind: str) -> None:
    assert shown(True, Event(kind, SLIM, "anything", {"log_lines": LOG})) == []


def test_github_folds_the_log_lines_of_a_finished_image_in_a_group() -> None:
    lines = shown(True, Event(EventKind.FINISHED, SLIM, "built", "built", tuple(LOG)))

    assert lines == [
        f"{SLIM}: built",
        f"::group::{SLIM} build log",
        *LOG,
        "::endgroup::",
    ]


@pytest.mark.parametrize(
    "github,data",
    [
        (False, {"status": "built", "log_lines": LOG}),
        (True, {"status": "up-to-date"}),
        (True, {"status": "failed", "log_lines": ()}),
    ],
    ids=["not-github", "no-log", "empty-log"],
)
def test_no_group_without_github_or_without_log_lines(
    github: bool, data: dict[str, object]
) -> None:
    event = Event(EventKind.FINISHED, SLIM, "done", **data)  # type: ignore[arg-type]
    assert shown(github, event) == [f"{SLIM}: done"]


@pytest.mark.parametrize("value,github", [("true", True), ("false", False), (None, False)])
def test_github_folding_follows_github_actions_when_not_told(
    monkeypatch: pytest.MonkeyPatch, value: str | None, github: bool
) -> None:
    if value is None:
        monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    else:
        monkeypatch.setenv("GITHUB_ACTIONS", value)

    assert PlainView(io.StringIO()).github is github
