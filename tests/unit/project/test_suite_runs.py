"""The record of a run of the suite that the next run reads (tests/integration/leftovers.py):
whether the run it names is alive, and what a run that starts with too little room says."""

from __future__ import annotations

import os
import shutil
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


class PruningApi:
    """The engine's build-cache prune, on a disk this test keeps: each call frees what the
    cache holds above what it keeps, as BuildKit counts it, or all that is on the disk."""

    def __init__(self, room: list[int], counted: int, on_disk: int) -> None:
        self.room, self.counted, self.on_disk, self.calls = room, counted, on_disk, []

    def prune_builds(self, keep_storage: int | None = None, all: bool | None = None) -> dict:
        self.calls.append("all" if all else keep_storage)
        # BuildKit's own count undercounts the snapshots its records share: trimming to keep
        # bytes frees only what it counts above them.
        freed = self.on_disk if all else max(0, self.counted - (keep_storage or 0))
        self.on_disk -= freed
        self.counted = 0 if all else min(self.counted, keep_storage or 0)
        self.room[0] += freed
        return {"SpaceReclaimed": freed}


def trim(
    monkeypatch: pytest.MonkeyPatch,
    free_gb: float,
    need_gb: float,
    counted_gb: float,
    on_disk_gb: float,
) -> tuple[list, float]:
    """The trims asked for and the GB free after them, from `free_gb` free with a cache that
    BuildKit counts as `counted_gb` and that holds `on_disk_gb`."""
    room = [int(free_gb * 10**9)]
    api = PruningApi(room, int(counted_gb * 10**9), int(on_disk_gb * 10**9))
    engine = type("Engine", (), {"api": api})()
    here = (str(Path.cwd()),)
    monkeypatch.setattr(leftovers, "room", lambda _engine: Room(room[0], here))
    after = leftovers.trim_build_cache(engine, Room(room[0], here), need_gb)
    return api.calls, after.free_bytes / 10**9


def test_the_build_cache_is_trimmed_to_its_warm_part_first_and_whole_only_when_that_is_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keep = leftovers.BUILD_CACHE_KEEP_BYTES
    # Room enough: nothing is trimmed.
    assert trim(monkeypatch, 50, 45, 20, 20) == ([], 50)
    # The warm 10 GB kept is enough.
    assert trim(monkeypatch, 40, 45, 20, 20) == ([keep], 50)
    # As CI saw it: BuildKit counts 20 GB of a cache whose snapshots hold 30 GB; trimmed "to 10
    # GB", the room is still short, and the whole cache goes.
    assert trim(monkeypatch, 33, 45, 20, 30) == ([keep, "all"], 63)
    # Short after everything: both trims, and the caller says what holds the rest.
    assert trim(monkeypatch, 5, 45, 20, 30) == ([keep, "all"], 35)


def test_a_need_larger_than_the_disk_trims_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # Emptying a cache cannot give more than the disk has; trimming would only make the runs
    # beside this one build cold.
    disk = shutil.disk_usage(Path.cwd()).total / 10**9
    assert trim(monkeypatch, 10, disk + 1, 20, 30) == ([], 10)
