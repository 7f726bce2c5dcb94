"""The record of a run of the suite that the next run reads (tests/integration/leftovers.py):
whether the run it names is alive, and what a run that starts with too little room says."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration import leftovers
from tests.integration.leftovers import Room, RunRecord


def test_a_record_reads_back_as_written() -> None:
    record = RunRecord(4242, "1234567", frozenset({"sha256:b", "sha256:a"}))
    assert RunRecord.from_json(record.to_json()) == record


def test_the_start_time_is_read_past_a_command_name_with_spaces_and_parentheses(
    tmp_path: Path,
) -> None:
    (tmp_path / "77").mkdir()
    fields = ["S", *[str(n) for n in range(4, 22)], "98765", "0"]
    (tmp_path / "77" / "stat").write_text(f"77 (run (tests) x) {' '.join(fields)}\n")
    assert leftovers.process_started(77, tmp_path) == "98765"
    assert leftovers.process_started(78, tmp_path) is None


def test_a_run_is_alive_only_with_its_pid_and_its_start_time() -> None:
    started = leftovers.process_started(os.getpid())
    assert started is not None
    assert leftovers.is_alive(RunRecord(os.getpid(), started))
    # The pid of a run killed before a restart, now another process's: not that run.
    assert not leftovers.is_alive(RunRecord(os.getpid(), str(int(started) + 1)))
    assert not leftovers.is_alive(RunRecord(2**22 + 1, started))  # above pid_max's default


def test_names_of_the_tests_with_or_without_a_registry_are_theirs() -> None:
    assert leftovers.ours("imagekit-it-0a1b/pytorch:2.13-slim", "imagekit-it-")
    assert leftovers.ours("127.0.0.1:5000/imagekit-it-0a1b/pytorch:x", "imagekit-it-")
    assert leftovers.ours("/imagekit-it-fresh-debian13-0c3b22", "imagekit-it-")
    assert not leftovers.ours("imagekit-base/debian:bookworm", "imagekit-it-")
    assert not leftovers.ours("me/imagekit-itinerary:1", "imagekit-it-")


def test_too_little_room_says_how_much_what_holds_it_and_how_to_free_it() -> None:
    usage = {
        "Images": [{"Size": 30 * 10**9}, {"Size": 8 * 10**9}],
        "Containers": [{"SizeRw": 10**9}, {"SizeRw": None}],
        "BuildCache": [{"Size": 7 * 10**9}],
    }
    said = leftovers.too_little_room(Room(12_300_000_000, ("/tmp", "/var/lib/docker")), 30, usage)
    assert "12.3 GB free on /tmp and /var/lib/docker" in said
    assert "needs about 30 GB" in said
    assert "images 38.0 GB, containers 1.0 GB, build cache 7.0 GB" in said
    assert "docker builder prune" in said and leftovers.MIN_FREE_VARIABLE in said


def test_a_classic_store_the_containerd_store_stranded_is_counted_and_named(
    tmp_path: Path,
) -> None:
    layer = tmp_path / "overlay2" / "0a1b" / "diff"
    layer.mkdir(parents=True)
    (layer / "libtorch.so").write_bytes(b"x" * 3000)
    (layer / "link").symlink_to("libtorch.so")
    containerd = {"Driver": "overlayfs", "DockerRootDir": str(tmp_path)}
    stranded = leftovers.stranded_classic_store(containerd)
    assert stranded == (tmp_path / "overlay2", 3000)
    said = leftovers.too_little_room(Room(10**9, ("/tmp",)), 45, {}, stranded)
    assert f"{tmp_path / 'overlay2'} holds 0.0 GB of the classic image store" in said
    assert f"removing {tmp_path / 'overlay2'} and {tmp_path / 'image'} frees it" in said
    # The classic store itself, or no folder left: nothing is stranded, nothing is said.
    assert leftovers.stranded_classic_store({**containerd, "Driver": "overlay2"}) is None
    assert leftovers.stranded_classic_store({**containerd, "DockerRootDir": "/nonexistent"}) is None
    assert "classic image store" not in leftovers.too_little_room(Room(10**9, ("/",)), 45, {})


@pytest.mark.parametrize(("value", "need"), [(None, leftovers.MIN_FREE_GB), ("4.5", 4.5)])
def test_the_room_asked_for_can_be_set(
    monkeypatch: pytest.MonkeyPatch, value: str | None, need: float
) -> None:
    if value is None:
        monkeypatch.delenv(leftovers.MIN_FREE_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(leftovers.MIN_FREE_VARIABLE, value)
    assert leftovers.min_free_gb() == need
    assert Room(int(need * 10**9), ("/",)).enough(leftovers.min_free_gb())
    assert not Room(int(need * 10**9) - 1, ("/",)).enough(leftovers.min_free_gb())
