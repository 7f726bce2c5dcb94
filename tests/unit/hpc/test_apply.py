"""Layers applied into a folder by the export's adapter (adapters/export.py `RootTree`), each
rule on planted layers made in memory: no engine."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from imagekit.adapters.export import RootTree, write_runtime
from imagekit.errors import InputError
from tests.unit.hpc.tars import MTIME, Entry, file, folder, hardlink, layer, special, symlink

EPOCH = 1_600_000_000


def applied(root: Path, *layers: bytes) -> RootTree:
    """`layers` applied in order into `root`, every folder finished."""
    tree = RootTree(root, EPOCH)
    for data in layers:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            tree.apply(archive)
    tree.finish()
    tree.finish_root(root)
    return tree


def names(root: Path) -> list[str]:
    found = []
    for here, folders, files in os.walk(root):
        for name in (*folders, *files):
            found.append(os.path.relpath(os.path.join(here, name), root))
    return sorted(found)


def base(*more: Entry) -> bytes:
    return layer(
        folder("etc"), file("etc/motd", b"hi"), file("etc/keep"), folder("var"),
        folder("var/cache"), file("var/cache/old"), folder("var/cache/deep"),
        file("var/cache/deep/x"), *more,
    )  # fmt: skip


def test_a_whiteout_removes_a_file_or_a_folder_of_the_layers_below(tmp_path: Path) -> None:
    root = tmp_path / "root"
    applied(root, base(), layer(file("etc/.wh.motd"), file("var/.wh.cache")))
    assert names(root) == ["etc", "etc/keep", "var"]


def test_a_whiteout_never_removes_what_its_own_layer_wrote(tmp_path: Path) -> None:
    root = tmp_path / "root"
    applied(root, base(), layer(file("etc/motd", b"new"), file("etc/.wh.motd")))
    assert (root / "etc" / "motd").read_bytes() == b"new"


@pytest.mark.parametrize("marker_first", [True, False])
def test_an_opaque_folder_keeps_only_its_own_layer_s_entries(
    tmp_path: Path, marker_first: bool
) -> None:
    root = tmp_path / "root"
    marker, new = file("var/cache/.wh..wh..opq"), file("var/cache/new")
    applied(root, base(), layer(*([marker, new] if marker_first else [new, marker])))
    assert names(root) == ["etc", "etc/keep", "etc/motd", "var", "var/cache", "var/cache/new"]


@pytest.mark.parametrize("name", ["../escaped", "etc/../../escaped", "/escaped"])
def test_a_climbing_or_absolute_member_is_refused_and_nothing_lands_outside(
    tmp_path: Path, name: str
) -> None:
    root = tmp_path / "root"
    with pytest.raises(InputError, match="a layer of the image has a member"):
        applied(root, layer(folder("etc"), file(name)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]


@pytest.mark.parametrize("target", ["OUTSIDE", "../../../../../../../..", "/"])
def test_a_link_on_a_member_s_way_never_leads_outside_the_root(tmp_path: Path, target: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = str(outside) if target == "OUTSIDE" else target
    root = tmp_path / "root"
    applied(root, layer(symlink("evil", target)), layer(file("evil/pwned", b"p")))
    assert list(outside.iterdir()) == []
    assert (root / "evil").is_symlink() and os.readlink(root / "evil") == target
    inside = root / target.lstrip("/").replace("../", "").strip("./") / "pwned"
    assert inside.read_bytes() == b"p"  # where a container would see it, in the root


def test_a_member_named_as_a_link_replaces_the_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    applied(root, layer(symlink("f", str(outside / "f"))), layer(file("f", b"mine")))
    assert not (root / "f").is_symlink() and (root / "f").read_bytes() == b"mine"
    assert list(outside.iterdir()) == []


def test_a_link_to_a_folder_inside_is_followed_like_usrmerge(tmp_path: Path) -> None:
    root = tmp_path / "root"
    usr = layer(folder("usr"), folder("usr/lib"), symlink("lib", "usr/lib"))
    applied(root, usr, layer(file("lib/libx.so", b"x")))
    assert (root / "usr" / "lib" / "libx.so").read_bytes() == b"x"


def test_a_hard_link_is_the_same_file(tmp_path: Path) -> None:
    root = tmp_path / "root"
    applied(root, layer(folder("bin"), file("bin/a", b"A", 0o755), hardlink("bin/b", "bin/a")))
    a, b = (root / "bin" / "a").stat(), (root / "bin" / "b").stat()
    assert (a.st_ino, a.st_nlink) == (b.st_ino, 2)


def test_a_hard_link_to_nothing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="which no layer before it made"):
        applied(tmp_path / "root", layer(hardlink("b", "a")))


def test_device_nodes_and_fifos_are_skipped_and_counted(tmp_path: Path) -> None:
    root = tmp_path / "root"
    nodes = [special("dev/null", tarfile.CHRTYPE), special("dev/sda", tarfile.BLKTYPE)]
    tree = applied(root, layer(folder("dev"), *nodes, special("run/fifo", tarfile.FIFOTYPE)))
    assert tree.skipped == 3
    assert names(root) == ["dev"]


def test_modes_and_times_are_the_members_once_the_folders_are_finished(tmp_path: Path) -> None:
    root = tmp_path / "root"
    applied(
        root,
        layer(folder("./", 0o755, 1000), folder("ro", 0o555, 2000), file("ro/a", mode=0o4755)),
        layer(file("ro/b", mode=0o600, mtime=3000), symlink("ro/l", "a", mtime=4000)),
    )
    ro = (root / "ro").stat()
    assert (stat.S_IMODE(ro.st_mode), ro.st_mtime) == (0o555, 2000)  # b was added after
    assert (root / "ro" / "a").stat().st_mode & 0o7777 == 0o4755
    b = (root / "ro" / "b").stat()
    assert (stat.S_IMODE(b.st_mode), b.st_mtime) == (0o600, 3000)
    assert (root / "ro" / "l").lstat().st_mtime == 4000
    assert root.stat().st_mtime == 1000


def test_folders_no_member_describes_get_the_image_s_time(tmp_path: Path) -> None:
    root = tmp_path / "root"
    applied(root, layer(file("made/as/parents/f")))
    for path in (root / "made", root / "made" / "as", root / "made" / "as" / "parents"):
        assert (stat.S_IMODE(path.stat().st_mode), path.stat().st_mtime) == (0o755, EPOCH)
    assert root.stat().st_mtime == EPOCH


def test_each_kind_replaces_another_in_a_later_layer(tmp_path: Path) -> None:
    root = tmp_path / "root"
    first = layer(folder("d"), file("d/x"), file("f"), symlink("s", "f"))
    applied(root, first, layer(file("d", b"now a file"), folder("f"), file("s", b"now a file")))
    assert (root / "d").read_bytes() == b"now a file"
    assert (root / "f").is_dir() and not (root / "s").is_symlink()


def test_a_compressed_layer_is_read(tmp_path: Path) -> None:
    root = tmp_path / "root"
    applied(root, layer(file("z", b"zipped"), compression="gz"))
    assert (root / "z").read_bytes() == b"zipped"


def test_the_environment_files_and_mount_points_are_written_with_the_image_s_time(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    tree = RootTree(root, EPOCH)
    with tarfile.open(fileobj=io.BytesIO(base(file("etc/hosts", b"image's"))), mode="r") as tar:
        tree.apply(tar)
    write_runtime(tree, ["PATH=/opt/venv/bin:/usr/bin", "HOME=/home/ml", "LANG=C.UTF-8"])
    tree.finish()
    tree.finish_root(root)
    assert (root / "ch" / "environment").read_text() == (
        "PATH=/opt/venv/bin:/usr/bin\nLANG=C.UTF-8\n"
    )
    assert (
        "export PATH='/opt/venv/bin:/usr/bin'\n"
        in (root / ".singularity.d" / "env" / "80-imagekit.sh").read_text()
    )
    assert (root / "etc" / "environment").read_text().startswith("PATH=/opt/venv/bin")
    assert (root / "etc" / "hosts").read_bytes() == b"image's"  # kept as the image has it
    for made in ("ch/environment", ".singularity.d/env", ".singularity.d", "etc/passwd", "proc"):
        assert (root / made).stat().st_mtime == EPOCH, made
    assert stat.S_IMODE((root / "tmp").stat().st_mode) == 0o1777
    assert stat.S_IMODE((root / "ch" / "environment").stat().st_mode) == 0o644
    assert (root / "etc").stat().st_mtime == MTIME  # the image's folder keeps its time
