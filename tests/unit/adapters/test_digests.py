"""The digests a build context's files are hashed into, remembered per machine."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from imagekit.adapters import digests as digests_module
from imagekit.adapters.digests import FILE, DigestCache
from imagekit.adapters.installer import rendering
from imagekit.build.inputs import RenderInputs
from tests.fakes import counting_file_sha256


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file the cache reads to hash it."""
    return counting_file_sha256(monkeypatch, digests_module)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_file_is_read_once_then_remembered_across_runs(tmp_path: Path, reads: list[Path]) -> None:
    wheel = tmp_path / "torch-2.13.0-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"wheel bytes")
    first = DigestCache(tmp_path / "cache", settled_s=0)
    assert first.digest(wheel) == first.digest(wheel) == sha256(b"wheel bytes")
    # A later build (another process) finds it on disk.
    assert DigestCache(tmp_path / "cache", settled_s=0).digest(wheel) == sha256(b"wheel bytes")
    assert reads == [wheel]


def test_a_file_written_again_is_read_again_even_at_its_old_size(
    tmp_path: Path, reads: list[Path]
) -> None:
    wheel = tmp_path / "a.whl"
    wheel.write_bytes(b"aaaa")
    cache = DigestCache(tmp_path / "cache", settled_s=0)
    assert cache.digest(wheel) == sha256(b"aaaa")
    time.sleep(0.05)  # past the file system clock's tick
    wheel.write_bytes(b"bbbb")  # in place: the same inode and size
    assert DigestCache(tmp_path / "cache", settled_s=0).digest(wheel) == sha256(b"bbbb")
    assert reads == [wheel, wheel]


def test_a_new_link_to_a_file_keeps_its_digest(tmp_path: Path, reads: list[Path]) -> None:
    """Each build links the wheels into its context: their change time moves, not their
    bytes."""
    wheel = tmp_path / "a.whl"
    wheel.write_bytes(b"linked")
    cache = DigestCache(tmp_path / "cache", settled_s=0)
    cache.digest(wheel)
    os.link(wheel, tmp_path / "context-copy.whl")
    assert DigestCache(tmp_path / "cache", settled_s=0).digest(wheel) == sha256(b"linked")
    assert reads == [wheel]


def test_a_file_changed_moments_ago_is_not_remembered(tmp_path: Path, reads: list[Path]) -> None:
    """Written within the file system clock's tick of its hashing, a second write could leave
    its size and times as they were: such a file is read again until it has settled."""
    wheel = tmp_path / "a.whl"
    wheel.write_bytes(b"fresh")
    cache = DigestCache(tmp_path / "cache", settled_s=3600)
    assert cache.digest(wheel) == cache.digest(wheel) == sha256(b"fresh")
    assert reads == [wheel, wheel] and not (tmp_path / "cache" / FILE).exists()


def test_another_file_in_its_place_is_read_again(tmp_path: Path, reads: list[Path]) -> None:
    wheel = tmp_path / "a.whl"
    wheel.write_bytes(b"one")
    cache = DigestCache(tmp_path / "cache", settled_s=0)
    cache.digest(wheel)
    replacement = tmp_path / "new.whl"
    replacement.write_bytes(b"two")
    replacement.replace(wheel)
    assert cache.digest(wheel) == sha256(b"two")
    assert reads == [wheel, wheel]


def test_an_unwritable_cache_still_gives_the_digests(tmp_path: Path) -> None:
    wheel = tmp_path / "a.whl"
    wheel.write_bytes(b"x")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")  # the cache folder cannot be made under a file
    assert DigestCache(blocker / "cache").digest(wheel) == sha256(b"x")


def test_a_damaged_or_foreign_cache_file_is_read_as_empty(tmp_path: Path) -> None:
    wheel = tmp_path / "a.whl"
    wheel.write_bytes(b"x")
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / FILE).write_text('{"version": 1, "digests": {')  # cut short
    assert DigestCache(folder, settled_s=0).digest(wheel) == sha256(b"x")
    data = json.loads((folder / FILE).read_text())
    assert data["version"] == 1 and list(data["digests"].values()) == [sha256(b"x")]


def test_two_builds_writing_at_once_keep_both_and_drop_files_that_are_gone(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "cache"
    one, two, gone = (tmp_path / f"{n}.whl" for n in ("one", "two", "gone"))
    for path in (one, two, gone):
        path.write_bytes(path.name.encode())
    first, second = DigestCache(folder, settled_s=0), DigestCache(folder, settled_s=0)
    first.digest(gone)
    gone.unlink()
    first.digest(one)
    second.digest(two)  # read the file before `one` was added: merged, not overwritten
    kept = json.loads((folder / FILE).read_text())["digests"]
    assert sorted(kept.values()) == sorted([sha256(b"one.whl"), sha256(b"two.whl")])
    assert not list(folder.glob(".digests-*"))  # no temporary file left behind


def test_build_inputs_hash_the_wheelhouse_through_the_machines_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(digests_module, "SETTLED_S", 0)  # the wheel was written just now
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    (wheelhouse / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"t")
    _, inputs = rendering(RenderInputs(wheelhouse=wheelhouse, no_ca_cert=True), [], buildkit=True)
    assert inputs.digest is not None
    inputs.digest(next(wheelhouse.iterdir()))
    kept = json.loads((tmp_path / "xdg" / "imagekit" / FILE).read_text())["digests"]
    assert list(kept.values()) == [sha256(b"t")]
