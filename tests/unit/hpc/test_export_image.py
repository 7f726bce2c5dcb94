"""`export_image` end to end on a planted engine (adapters/export.py): the output appears whole
or not at all, the same image exports the same, and each refusal has its exit code."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import docker.errors
import pytest

from imagekit.adapters.engine import DockerEngine
from imagekit.adapters.export import export_image
from imagekit.errors import ExitCode, ImagekitError
from imagekit.hpc.export import ExportFormat
from tests.unit.hpc.tars import file, folder, layer, saved_image, special, symlink

CREATED = "2026-12-07T20:03:34.123456789Z"
EPOCH = 1796673814
ENV = ["PATH=/opt/venv/bin:/usr/bin", "HOME=/home/ml"]
IMAGE = saved_image(
    layer(folder("usr"), folder("usr/bin"), symlink("bin", "usr/bin"), file("usr/bin/sh")),
    layer(folder("opt"), folder("opt/venv"), file("opt/venv/python", mode=0o755),
          special("dev/null", b"3"), compression="gz"),
)  # fmt: skip


class PlantedImage:
    def __init__(self, saved: bytes, stop: BaseException | None = None) -> None:
        self.attrs = {"Created": CREATED, "Config": {"Env": ENV}}
        self.id = "sha256:" + "ab" * 32
        self.saved, self.stop = saved, stop

    def save(self, named: bool = True) -> Iterator[bytes]:
        assert named is False
        for start in range(0, len(self.saved), 4096):
            if self.stop is not None and start > len(self.saved) // 2:
                raise self.stop
            yield self.saved[start : start + 4096]


def engine_with(image: PlantedImage) -> DockerEngine:
    def get(reference: str) -> PlantedImage:
        if reference != "r/x:1":
            raise docker.errors.ImageNotFound(f"No such image: {reference}")
        return image

    return cast(
        DockerEngine, SimpleNamespace(client=SimpleNamespace(images=SimpleNamespace(get=get)))
    )


def listing(root: Path) -> list[tuple[str, int, int, str]]:
    """Every entry: its path, mode, time, and content or link target."""
    found = []
    for here, folders, files in os.walk(root):
        for name in sorted([*folders, *files]):
            path = Path(here) / name
            info = path.lstat()
            what = os.readlink(path) if path.is_symlink() else ""
            what = path.read_text() if path.is_file() and not path.is_symlink() else what
            found.append((str(path.relative_to(root)), info.st_mode, int(info.st_mtime), what))
    return sorted(found)


def test_an_export_is_the_image_s_root_and_the_same_each_time(tmp_path: Path) -> None:
    engine = engine_with(PlantedImage(IMAGE))
    first = export_image(engine, "r/x:1", tmp_path / "a", ExportFormat.DIR)
    export_image(engine, "r/x:1", tmp_path / "b", ExportFormat.DIR)
    assert listing(tmp_path / "a") == listing(tmp_path / "b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]  # no work folder left
    assert (tmp_path / "a" / "ch" / "environment").read_text() == "PATH=/opt/venv/bin:/usr/bin\n"
    assert (tmp_path / "a" / "ch").stat().st_mtime == EPOCH
    assert (first.skipped, first.image_id, first.path) == (1, "sha256:" + "ab" * 32, tmp_path / "a")
    assert first.entries == len(listing(tmp_path / "a"))


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), OSError(28, "No space left on device")])
def test_an_export_stopped_half_way_leaves_nothing(tmp_path: Path, stop: BaseException) -> None:
    engine = engine_with(PlantedImage(IMAGE, stop))
    with pytest.raises(type(stop)):
        export_image(engine, "r/x:1", tmp_path / "a", ExportFormat.DIR)
    assert list(tmp_path.iterdir()) == []


def test_a_bad_layer_leaves_nothing(tmp_path: Path) -> None:
    read_only = layer(folder("ro", 0o555), file("ro/f"), folder("x"), file("x/../../escape"))
    engine = engine_with(PlantedImage(saved_image(read_only)))
    with pytest.raises(ImagekitError, match="climbs out"):
        export_image(engine, "r/x:1", tmp_path / "a", ExportFormat.DIR)
    assert list(tmp_path.iterdir()) == []


def test_an_image_the_engine_lacks_is_bad_input_naming_build_and_pull(tmp_path: Path) -> None:
    with pytest.raises(ImagekitError) as refused:
        export_image(engine_with(PlantedImage(IMAGE)), "r/y:1", tmp_path / "a", ExportFormat.DIR)
    assert refused.value.exit_code == ExitCode.BAD_INPUT
    assert "imagekit build" in refused.value.hint and "docker pull r/y:1" in refused.value.hint


def test_a_squashfs_is_made_by_mksquashfs_from_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    fake = tools / "mksquashfs"
    fake.write_text('#!/bin/sh\n/bin/ls -a "$1" > "$2"; echo "$@" >> "$2"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))
    out = tmp_path / "x.sqfs"
    done = export_image(engine_with(PlantedImage(IMAGE)), "r/x:1", out, ExportFormat.SQUASHFS)
    *listed, argv = out.read_text().splitlines()
    assert {"bin", "ch", "opt", "usr", "tmp", "proc", ".singularity.d"} <= set(listed)
    assert argv.split()[2:] == [
        "-noappend", "-all-root", "-no-xattrs", "-mkfs-time", str(EPOCH), "-quiet"
    ]  # fmt: skip
    assert done.size_bytes == out.stat().st_size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tools", "x.sqfs"]


def test_no_mksquashfs_is_exit_3_naming_the_package_before_the_engine_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    engine = cast(DockerEngine, SimpleNamespace())  # any call of it fails the test
    with pytest.raises(ImagekitError) as refused:
        export_image(engine, "r/x:1", tmp_path / "x.sqfs", ExportFormat.SQUASHFS)
    assert refused.value.exit_code == ExitCode.ENGINE_UNAVAILABLE
    assert "apt-get install squashfs-tools" in refused.value.hint
    assert list(tmp_path.iterdir()) == []
