"""What a killed test run left on the engine, and room on the disk before the next one starts.

A run of `make test` that is killed (the machine restarted under it, a CI job cancelled, a
SIGKILL) never reaches its fixtures' ends: its images (`imagekit-it-<hex>/...`, about 2 GB
each), its boxes' containers and volumes, and the build stages it left dangling stay on the
engine. Seen: a run killed at 08:18 left 38 GB there, and the CI run that started next failed
with "no space left on device" in 118 tests. scripts/run-tests.sh therefore writes down, for
each engine, the run in progress (its pid and the dangling images before it started). The next
run that finds that record with its process gone removes what that run made; one that finds the
process alive stops at once, because two runs on one engine and one disk collide.

Then it checks the room: the suite needs about MIN_FREE_GB GB at its peak (two boxed engines, OCI
archives, a registry, the fresh-setup boxes), and a run that starts with less fails late and
everywhere. It stops before any test with what takes the room and how to free it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import docker

from tests.integration.sweep import remove_names, remove_with_ancestors

# The prefix of every image, container, volume and network a test names, and the label of
# those it labels (tests/integration/conftest.py, engines.py, test_fresh_setup.py).
PREFIX = "imagekit-it-"
LABELS = ("io.imagekit.test", "io.imagekit.test-box")
# The labels of imagekit's build stages (templates/Dockerfile.j2), which the legacy builder
# leaves dangling.
STAGE_LABELS = ("io.imagekit.stage", "io.imagekit.cell")
# The BuildKit cache kept when the room is short: enough for the suite's own cached builds to
# stay warm on the same machine (a day of experiments left 17 GB there).
BUILD_CACHE_KEEP_BYTES = 10 * 10**9
# The free space a run needs at its peak, from the disk's low point that scripts/run-tests.sh
# prints: fresh-clone runs at 604a526 and 9c871d0 started with 49 and 50 GB free and went down
# to 13 and 9 GB (36 and 41 GB used at the peak), plus a margin; IMAGEKIT_TEST_MIN_FREE_GB
# overrides it.
MIN_FREE_GB = 45
STATE_VARIABLE = "IMAGEKIT_TEST_STATE"
MIN_FREE_VARIABLE = "IMAGEKIT_TEST_MIN_FREE_GB"


def state_dir() -> Path:
    """Where runs are written down: IMAGEKIT_TEST_STATE, else under the Makefile's cache."""
    value = os.environ.get(STATE_VARIABLE)
    return Path(value) if value else Path.home() / ".cache" / "imagekit" / "test-runs"


@dataclass(frozen=True)
class RunRecord:
    """A run of the suite in progress on one engine, as the next run reads it."""

    pid: int
    # The process's start time (field 22 of /proc/PID/stat): a pid is reused after a restart.
    started: str
    dangling_before: frozenset[str] = field(default_factory=frozenset)

    def to_json(self) -> str:
        return json.dumps(
            {
                "pid": self.pid,
                "started": self.started,
                "dangling_before": sorted(self.dangling_before),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        data = json.loads(text)
        return cls(int(data["pid"]), str(data["started"]), frozenset(data["dangling_before"]))


def process_started(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The start time of process `pid`, or None where no such process runs."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: count after it.
    return stat.rsplit(")", 1)[1].split()[19]


def is_alive(record: RunRecord, proc: Path = Path("/proc")) -> bool:
    """Whether the run the record names is still running (same pid, same start time)."""
    return process_started(record.pid, proc) == record.started


def record_path(engine_id: str) -> Path:
    """The record of the run on the engine with this ID (one per engine: DOCKER_HOST)."""
    return state_dir() / f"run-{engine_id.replace(':', '')[:32]}.json"


@dataclass
class Removed:
    """What a sweep of leftovers removed, for the line it prints."""

    containers: int = 0
    images: int = 0
    volumes: int = 0
    networks: int = 0
    left: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.containers} containers, {self.images} images, {self.volumes} volumes, "
            f"{self.networks} networks"
        )


def ours(name: str, prefix: str) -> bool:
    """Whether a name (a container's, a tag with or without a registry) is a test's."""
    return name.lstrip("/").startswith(prefix) or f"/{prefix}" in name


def remove_leftovers(
    engine: docker.DockerClient,
    dangling_before: frozenset[str],
    prefix: str = PREFIX,
    labels: tuple[str, ...] = LABELS,
    stage_labels: tuple[str, ...] = STAGE_LABELS,
) -> Removed:
    """Remove what test runs no longer running made: containers, images, volumes and networks
    named with `prefix` or carrying one of `labels`, and the dangling imagekit build stages that
    are not in `dangling_before` (those the killed run found, and left alone, stay)."""
    removed = Removed()
    for container in engine.containers.list(all=True):
        if ours(container.name, prefix) or any(k in container.labels for k in labels):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True, v=True)
                removed.containers += 1
    # Newest first, so that a child goes before the parent it was built on.
    images = sorted(engine.images.list(), key=lambda i: i.attrs["Created"], reverse=True)
    for image in images:
        tags = [t for t in image.tags if ours(t, prefix)]
        labelled = any(k in image.labels for k in labels)
        # A labelled image that carries only names no test gave it is someone's: it stays.
        if not tags and (not labelled or image.tags):
            continue
        remove_names(engine, image.id, tags)
        removed.images += 1
    for image in engine.images.list(all=True, filters={"dangling": True}):
        stage = any(image.labels.get(k) for k in stage_labels)
        if stage and image.id not in dangling_before:
            removed.left += remove_with_ancestors(engine, image.id, set(dangling_before))
            removed.images += 1
    for volume in engine.volumes.list():
        if volume.name.startswith(prefix):
            with contextlib.suppress(docker.errors.APIError):
                volume.remove(force=True)
                removed.volumes += 1
    for network in engine.networks.list():
        if network.name.startswith(prefix):
            with contextlib.suppress(docker.errors.APIError):
                network.remove()
                removed.networks += 1
    return removed


@dataclass(frozen=True)
class Room:
    """The free space a run has, on the filesystems its engine and its temporary files use."""

    free_bytes: int
    paths: tuple[str, ...]

    def enough(self, need_gb: float) -> bool:
        return self.free_bytes >= need_gb * 10**9


def room(engine: docker.DockerClient) -> Room:
    """The least free space among the engine's data root (when it is on this machine) and the
    temporary folder: where both are one filesystem, that one's."""
    paths = [tempfile.gettempdir()]
    root = engine.info().get("DockerRootDir") or ""
    if root and Path(root).exists():
        paths.append(root)
    least: dict[int, tuple[int, list[str]]] = {}
    for path in paths:
        device = os.stat(path).st_dev
        free = shutil.disk_usage(path).free
        least.setdefault(device, (free, []))[1].append(path)
    free, where = min(least.values())
    return Room(free, tuple(where))


def min_free_gb() -> float:
    """The free space to ask for: IMAGEKIT_TEST_MIN_FREE_GB, else MIN_FREE_GB."""
    value = os.environ.get(MIN_FREE_VARIABLE)
    return float(value) if value else float(MIN_FREE_GB)


def stranded_classic_store(info: dict) -> tuple[Path, int] | None:
    """The classic store's layer folder and its bytes, where the engine now runs the containerd
    store and no longer reads it (an engine upgraded from 20.10 by `make engine`); else None.

    Seen: 24 GB stranded this way made a CI run stop with 33 GB free, while `docker system df`
    counted 0.4 GB of images."""
    root = Path(info.get("DockerRootDir") or "/var/lib/docker")
    folder = root / "overlay2"
    try:
        if info.get("Driver") == "overlay2" or not folder.is_dir():
            return None
    except OSError:  # a non-root account cannot look into the engine's root
        return None
    size = 0
    for path in folder.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink():
                size += path.lstat().st_size
    return (folder, size) if size else None


def too_little_room(
    room_now: Room, need_gb: float, usage: dict, stranded: tuple[Path, int] | None = None
) -> str:
    """What the run says when it starts with too little room, and how to make some."""
    kinds = {
        "Images": sum(i.get("Size", 0) for i in usage.get("Images") or []),
        "Containers": sum(c.get("SizeRw", 0) or 0 for c in usage.get("Containers") or []),
        "Build cache": sum(b.get("Size", 0) for b in usage.get("BuildCache") or []),
    }
    held = ", ".join(f"{k.lower()} {v / 10**9:.1f} GB" for k, v in kinds.items())
    where = " and ".join(room_now.paths)
    return (
        f"imagekit tests: {room_now.free_bytes / 10**9:.1f} GB free on {where};"
        f" the suite needs about {need_gb:g} GB at its peak (boxed engines, OCI archives, a"
        f" registry) and would fail late with 'no space left on device'.\n"
        f"    the engine holds: {held} (`docker system df -v` lists them)\n"
        + (
            f"    {stranded[0]} holds {stranded[1] / 10**9:.1f} GB of the classic image store,"
            f" which this engine's containerd store never reads: with dockerd stopped, removing"
            f" {stranded[0]} and {stranded[0].parent / 'image'} frees it\n"
            if stranded
            else ""
        )
        + f"    hint: free room: `docker builder prune` drops the build cache, `docker image prune`"
        f" the dangling images, `docker image rm` what you no longer use; or set"
        f" {MIN_FREE_VARIABLE} to start anyway"
    )


def engine_id(engine: docker.DockerClient) -> str:
    """The engine's ID, to keep one record per engine."""
    return str(engine.info().get("ID") or "default")


def prune_build_cache(
    engine: docker.DockerClient, keep: int | None = BUILD_CACHE_KEEP_BYTES
) -> int:
    """Trim the engine's BuildKit cache to `keep` bytes (least recently used first), or all of
    it where `keep` is None; the bytes freed. An engine without BuildKit's prune answers
    nothing to trim."""
    try:
        answer = (
            engine.api.prune_builds(all=True)
            if keep is None
            else engine.api.prune_builds(keep_storage=keep)
        )
    except docker.errors.APIError:
        return 0
    return int(answer.get("SpaceReclaimed") or 0)


def within_reach(room_now: Room, need_gb: float) -> bool:
    """Whether freeing room on this disk could ever give `need_gb`: a need larger than the
    disk itself is not met by emptying any cache, and trimming for it would only cool the
    cache of the runs beside."""
    return need_gb * 10**9 <= shutil.disk_usage(room_now.paths[0]).total


def trim_build_cache(engine: docker.DockerClient, room_now: Room, need_gb: float) -> Room:
    """Trim the build cache, the one thing on the engine a run may trim (a cache), until the
    room is `need_gb` or nothing is left to trim; the room then. First to its least recently
    used BUILD_CACHE_KEEP_BYTES, which keeps the suite's own cached builds warm; then all of
    it, because BuildKit's count of its cache on the containerd store misses the snapshots its
    records share (seen: trimmed to "10 GB", 24 GB of snapshots stayed, and CI stopped with
    43 GB free). Each trim is said on stderr."""
    for keep in (BUILD_CACHE_KEEP_BYTES, None):
        if room_now.enough(need_gb) or not within_reach(room_now, need_gb):
            break
        freed = prune_build_cache(engine, keep)
        kept = "nothing kept" if keep is None else f"{keep / 10**9:.0f} GB kept"
        print(
            f"imagekit tests: build cache trimmed by {freed / 10**9:.1f} GB ({kept}),"
            f" for {need_gb:g} GB free",
            file=sys.stderr,
        )
        room_now = room(engine)
    return room_now
