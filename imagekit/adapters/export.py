"""Adapter: `imagekit export`: an image read from the engine (`docker save`), its layers applied
into a folder as the invoking user, and that folder kept, or made one squashfs file.

Everything is made in a work folder beside the output (`.NAME.XXXX.export`): the saved tar
(its members come in any order, so it is read from a file, not the stream), the root folder,
the squashfs file. The output appears by one rename when it is whole; a failure or Ctrl-C
removes the work folder, so the output is never half an export.

The layers are applied as hpc/layers.py decides, by a user: nothing is chowned (the user owns
every file, as after `ch-convert` run by a user), device nodes and FIFOs are skipped and
counted, and folders stay writable until the end, when their modes and times are set deepest
first (adding an entry changes a folder's time).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import docker.errors
from docker.models.images import Image

from imagekit.adapters.engine import DockerEngine, engine_errors
from imagekit.build.reproducible import epoch_of
from imagekit.errors import EngineUnavailableError, InputError
from imagekit.hpc.export import (
    FILE_MODE,
    FOLDER_MODE,
    MOUNT_FILES,
    MOUNT_FOLDERS,
    SQUASHFS_HINT,
    SQUASHFS_TOOL,
    Exported,
    ExportFormat,
    mksquashfs_argv,
)
from imagekit.hpc.layers import (
    Parts,
    Whiteout,
    WhiteoutKind,
    depth_first,
    in_root,
    landing,
    member_parts,
    whiteout_of,
)
from imagekit.kernel.json import as_list, as_object
from imagekit.kernel.runtime_env import environment_of, runtime_files

CHUNK_BYTES = 1 << 20
PERMISSIONS = 0o7777  # what of a member's mode is kept: permissions, setuid, setgid, sticky
WORKING_FOLDER_MODE = stat.S_IRWXU  # every folder while the layers are applied


def remove(path: Path) -> None:
    """Remove what is at `path`, whatever its modes: a folder with all it holds, a link itself
    (never what it points to); nothing when there is nothing."""
    if path.is_dir() and not path.is_symlink():
        _writable(path)
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def _writable(folder: Path) -> None:
    """Make `folder` and every folder in it the user's to list and empty (a 0555 folder is)."""
    os.chmod(folder, WORKING_FOLDER_MODE)
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                _writable(Path(entry.path))


class RootTree:
    """A root filesystem being made in `root`: each layer applied over the ones before it.

    `folders`: each folder's mode and time, set by `finish`; a folder no member describes (made
    as a member's parent, or by the export) gets FOLDER_MODE and the image's time (`epoch`)."""

    def __init__(self, root: Path, epoch: int) -> None:
        self.root, self.epoch = root, epoch
        self._root = str(root)
        root.mkdir(mode=WORKING_FOLDER_MODE)
        self.folders: dict[Parts, tuple[int, float]] = {(): (FOLDER_MODE, epoch)}
        self.skipped = 0
        self.written: set[Parts] = set()  # the paths the layer being applied wrote
        # Each folder a member named, resolved (`folder`) and made: a layer names the same
        # folders over and over (36,000 members of the demo slim, ten names deep), and
        # resolving one asks the file system about every name on it. Every name on a resolved
        # path is a real folder, so a resolution holds until a folder or a link is removed or
        # replaced (`_remove`), which empties this.
        self._resolved: dict[Parts, Parts] = {}

    def path(self, parts: Parts) -> Path:
        return Path(self._at(parts))

    def _at(self, parts: Parts) -> str:
        return os.path.join(self._root, *parts)

    def target_of(self, parts: Parts) -> str | None:
        """The target of the link at `parts`; None where there is no link."""
        try:
            return os.readlink(self._at(parts))
        except OSError:  # not a link, or nothing there
            return None

    def folder(self, parts: Parts) -> Parts:
        """The folder `parts` names, inside the root (`in_root`), made where it is missing."""
        known = self._resolved.get(parts)
        if known is not None:
            return known
        resolved = in_root(parts, self.target_of)
        for depth in range(1, len(resolved) + 1):
            at = self._at(resolved[:depth])
            if not os.path.isdir(at):  # no link is on a resolved path
                os.mkdir(at, mode=WORKING_FOLDER_MODE)
                self.folders[resolved[:depth]] = (FOLDER_MODE, self.epoch)
        self._resolved[parts] = resolved
        return resolved

    def place(self, parts: Parts) -> Path:
        """Where a new entry named `parts` goes: its folder made, what was there removed."""
        where = (*self.folder(parts[:-1]), parts[-1])
        path = self.path(where)
        self._remove(path)
        self.written.add(where)
        return path

    def _remove(self, path: Path) -> None:
        """`remove`, forgetting the resolved folders where a folder or a link goes (a folder
        resolved through either would no longer be where it was)."""
        try:
            kind = stat.S_IFMT(os.lstat(path).st_mode)
        except FileNotFoundError:
            return
        if kind in (stat.S_IFDIR, stat.S_IFLNK):
            self._resolved.clear()
        remove(path)

    def apply(self, archive: tarfile.TarFile) -> None:
        """Apply one layer, member by member, over what the layers before it made."""
        self.written = set()
        for member in archive:
            self.add(member, archive)

    def add(self, member: tarfile.TarInfo, archive: tarfile.TarFile) -> None:
        """Apply one member of a layer (hpc/layers.py decides its name and whiteouts)."""
        parts = member_parts(member.name)
        if (whiteout := whiteout_of(parts)) is not None:
            self.white_out(whiteout)
        elif member.isdev():  # character and block devices, FIFOs: a user cannot make them
            self.skipped += 1
        elif member.isdir():
            self.add_folder(parts, member.mode & PERMISSIONS, member.mtime)
        elif not parts:
            raise InputError(f"a layer of the image makes its root a {member.type!r} entry")
        elif member.issym():
            path = self.place(parts)
            os.symlink(member.linkname, path)
            os.utime(path, (member.mtime, member.mtime), follow_symlinks=False)
        elif member.islnk():
            self.add_link(parts, member.linkname)
        elif member.isreg():
            self.write(parts, archive.extractfile(member), member.mode, member.mtime)

    def add_folder(self, parts: Parts, mode: int, mtime: float) -> None:
        """A folder: kept with what it holds where there is one, else made."""
        where = landing(parts, self.target_of)
        path = self.path(where)
        if not (path.is_dir() and not path.is_symlink()):
            path = self.place(parts)
            path.mkdir(mode=WORKING_FOLDER_MODE)
        self.folders[where] = (mode, mtime)
        self.written.add(where)

    def add_link(self, parts: Parts, linkname: str) -> None:
        """A hard link to an entry an earlier member (or layer) made."""
        target = landing(member_parts(linkname), self.target_of)
        if landing(parts, self.target_of) == target:
            return
        if not os.path.lexists(self.path(target)):
            raise InputError(f"a layer of the image links {'/'.join(parts)} to {linkname}, "
                             "which no layer before it made")  # fmt: skip
        os.link(self.path(target), self.place(parts), follow_symlinks=False)

    def write(self, parts: Parts, source: IO[bytes] | None, mode: int, mtime: float) -> None:
        """A regular file: `source`'s bytes (None: empty)."""
        path = self.place(parts)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            if source is not None:
                shutil.copyfileobj(source, out, CHUNK_BYTES)
            os.fchmod(out.fileno(), mode & PERMISSIONS)
        os.utime(path, (mtime, mtime), follow_symlinks=False)

    def white_out(self, whiteout: Whiteout) -> None:
        """Delete what a whiteout names from the layers below (never what this layer wrote)."""
        if whiteout.kind is WhiteoutKind.REMOVE:
            where = landing(whiteout.path, self.target_of)
            if where not in self.written:
                self._remove(self.path(where))
        elif whiteout.kind is WhiteoutKind.OPAQUE:
            folder = in_root(whiteout.path, self.target_of)
            path = self.path(folder)
            if path.is_dir():
                for name in sorted(os.listdir(path)):
                    if (*folder, name) not in self.written:
                        self._remove(path / name)

    def ensure(self, parts: Parts, mode: int, *, folder: bool) -> None:
        """A mount point: made empty (mode, the image's time) where the image has none."""
        where = landing(parts, self.target_of)
        if os.path.lexists(self.path(where)):
            return
        if folder:
            self.add_folder(parts, mode, self.epoch)
        else:
            self.write(parts, None, mode, self.epoch)

    def finish(self) -> None:
        """Give every folder but the root its mode and time, deepest first (the root's is
        `finish_root`'s: a folder moved to another folder must stay writable until then)."""
        for parts in depth_first([p for p in self.folders if p]):
            path = self.path(parts)
            if path.is_dir() and not path.is_symlink():
                mode, mtime = self.folders[parts]
                os.chmod(path, mode)
                os.utime(path, (mtime, mtime))

    def finish_root(self, root: Path) -> None:
        """Give the root, now at `root`, its mode and time."""
        mode, mtime = self.folders[()]
        os.chmod(root, mode)
        os.utime(root, (mtime, mtime))


def apply_layers(tree: RootTree, saved: Path) -> None:
    """Apply the layers of a `docker save` tar, in its manifest's order."""
    with tarfile.open(saved) as outer:
        images = as_list(json.load(_member(outer, "manifest.json")))
        layers = as_list(as_object(images[0]).get("Layers")) if images else []
        for layer in layers:
            try:
                with tarfile.open(fileobj=_member(outer, str(layer)), mode="r:*") as archive:
                    tree.apply(archive)
            except tarfile.ReadError as exc:
                raise InputError(
                    f"cannot read layer {layer} of the image: {exc}",
                    "an uncompressed, gzip, bzip2 or xz layer can be read; rebuild or "
                    "pull the image with one of those (zstd is not read)",
                ) from None


def _member(archive: tarfile.TarFile, name: str) -> IO[bytes]:
    found = archive.extractfile(name)
    if found is None:
        raise InputError(f"the engine's `docker save` tar has no file {name}")
    return found


def write_runtime(tree: RootTree, env: list[str]) -> None:
    """The image's environment in each runtime's file, and the mount points the runtimes bind
    over where the image has none."""
    for runtime_file, text in runtime_files(environment_of(env)).items():
        parts = member_parts(runtime_file.lstrip("/"))
        tree.write(parts, io.BytesIO(text.encode()), FILE_MODE, tree.epoch)
    for name, mode in MOUNT_FOLDERS.items():
        tree.ensure(member_parts(name), mode, folder=True)
    for name in MOUNT_FILES:
        tree.ensure(member_parts(name), FILE_MODE, folder=False)


def measure(root: Path) -> tuple[int, int]:
    """(entries, bytes) of a root filesystem: every file, folder and link in it, the root
    excluded; the sizes of its regular files, each hard-linked file once."""
    entries, size, seen = 0, 0, set()
    for folder, folders, files in os.walk(root):
        for name in (*folders, *files):
            entries += 1
            info = os.lstat(os.path.join(folder, name))
            if stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                size += info.st_size
    return entries, size


def squashfs_tool() -> str:
    """mksquashfs on PATH (exit 3 naming the package when there is none)."""
    found = shutil.which(SQUASHFS_TOOL)
    if found is None:
        raise EngineUnavailableError(f"{SQUASHFS_TOOL} is not installed", SQUASHFS_HINT)
    return found


def make_squashfs(tool: str, tree: Path, out: Path, epoch: int) -> None:
    """`out`, a squashfs file of the folder `tree` (hpc/export.py's `mksquashfs_argv`)."""
    done = subprocess.run(
        mksquashfs_argv(tool, tree, out, epoch), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no message"]
        raise InputError(
            f"{SQUASHFS_TOOL} failed (exit {done.returncode}): {said[0]}",
            f"check that {out.parent} is writable and has free space",
        )


def local_image(engine: DockerEngine, reference: str) -> Image:
    """The image `reference` names in the engine (exit 2 naming how to get it when absent)."""
    with engine_errors(f"looking up {reference}"):
        try:
            return engine.client.images.get(reference)
        except docker.errors.ImageNotFound:
            raise InputError(
                f"{reference} is not in the local engine",
                f"build it (`imagekit build`) or pull it (`docker pull {reference}`)",
            ) from None


def save(engine: DockerEngine, image: Image, reference: str, into: Path) -> None:
    """The image as `docker save` writes it, into the file `into`."""
    with engine_errors(f"saving {reference}"), into.open("wb") as out:
        for chunk in image.save(named=False):
            out.write(chunk)


@contextlib.contextmanager
def work_folder(out: Path) -> Iterator[Path]:
    """A folder beside `out` for everything an export makes, removed however it ends."""
    work = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".export"))
    try:
        yield work
    finally:
        remove(work)


def export_image(
    engine: DockerEngine, reference: str, out: Path, export_format: ExportFormat
) -> Exported:
    """Export the image `reference` names to `out` (a folder, or a squashfs file), whole or
    not at all."""
    began = time.monotonic()
    tool = squashfs_tool() if export_format is ExportFormat.SQUASHFS else ""
    image = local_image(engine, reference)
    epoch = epoch_of(str(image.attrs.get("Created", ""))) or 0
    env = [str(e) for e in as_list(as_object(image.attrs.get("Config")).get("Env"))]
    with work_folder(out) as work:
        tree = RootTree(work / "root", epoch)
        save(engine, image, reference, work / "save.tar")
        apply_layers(tree, work / "save.tar")
        (work / "save.tar").unlink()
        write_runtime(tree, env)
        tree.finish()
        entries, size = measure(tree.root)
        made = tree.root
        if tool:
            tree.finish_root(tree.root)
            made = work / "image.sqfs"
            make_squashfs(tool, tree.root, made, epoch)
            size = made.stat().st_size
        if os.path.lexists(out):
            raise InputError(f"{out} appeared while exporting", "remove it, or pick another --out")
        made.rename(out)
        if not tool:
            tree.finish_root(out)
    seconds = time.monotonic() - began
    image_id = str(image.id)
    return Exported(out, export_format, reference, image_id, size, entries, tree.skipped, seconds)
