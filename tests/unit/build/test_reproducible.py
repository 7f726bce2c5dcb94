"""build/reproducible.py: the epoch of a build."""

from __future__ import annotations

import pytest

from imagekit.build.reproducible import build_epoch, epoch_of


@pytest.mark.parametrize(
    ("created", "epoch"),
    [
        ("2023-11-14T22:13:20Z", 1700000000),
        # Docker's nanoseconds are cut to whole seconds, not rounded.
        ("2023-11-14T22:13:20.999999999Z", 1700000000),
        ("2023-11-15T00:13:20+02:00", 1700000000),
        ("2023-11-14T22:13:20", 1700000000),  # no zone: UTC, as engines mean it
        ("0001-01-01T00:00:00Z", None),  # an image with no creation time
        ("2025-11-30", None),
        ("", None),
    ],
)
def test_epoch_of_an_engines_created_time(created: str, epoch: int | None) -> None:
    assert epoch_of(created) == epoch


def test_the_callers_epoch_wins_over_the_parents() -> None:
    assert build_epoch(1800000000, "2023-11-14T22:13:20Z") == 1800000000
    assert build_epoch(None, "2023-11-14T22:13:20Z") == 1700000000
    assert build_epoch(0, "2023-11-14T22:13:20Z") == 0  # 1970 is a time a caller may ask for
    assert build_epoch(None, "") is None


def test_a_full_takes_the_epoch_its_slim_was_built_with_not_the_slims_build_time() -> None:
    """The legacy builder stamps slim's config with the time it was built: a rebuilt slim has
    another creation time, and full must still get the same epoch
    (tests/unit/build/test_build_run.py)."""
    assert build_epoch(None, "2026-12-05T12:00:00Z", "1700000000") == 1700000000
    assert build_epoch(1800000000, "2026-12-05T12:00:00Z", "1700000000") == 1800000000
    assert build_epoch(None, "2023-11-14T22:13:20Z", "") == 1700000000
    assert build_epoch(None, "2023-11-14T22:13:20Z", "not a number") == 1700000000
