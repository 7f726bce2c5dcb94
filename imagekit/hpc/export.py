"""What `imagekit export` writes, decided before anything is written. Pure.

An export is the image's root filesystem, its layers applied (hpc/layers.py), plus what the
runtimes need of it that an engine would have given the container: the image's environment in
each runtime's file (kernel/runtime_env.py) and the mount points `ch-run` binds over. The same
image exports to the same bytes: every time written is the image's own (a member's, else the
image's creation time) and the squashfs is made with its time fixed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from imagekit.kernel.reference import parse

SQUASHFS_SUFFIX = ".sqfs"
SQUASHFS_TOOL = "mksquashfs"
SQUASHFS_HINT = "install squashfs-tools (Debian/Ubuntu: apt-get install squashfs-tools)"
# An image named by its id (`sha256:` and all 64 digits, or a prefix of 12 or more).
_IMAGE_ID = re.compile(r"^(?:sha256:)?([a-f0-9]{12,64})$")
SHORT_ID = 12

FOLDER_MODE = 0o755  # the folders an export makes itself
FILE_MODE = 0o644  # the files it writes (the environment files, an empty /etc/hosts)
# The mount points `ch-run` binds the host's over (Charliecloud's ch-run(1), "Host files and
# directories available in container"); Apptainer and enroot bind over the same ones.
MOUNT_FOLDERS: dict[str, int] = {
    "dev": FOLDER_MODE,
    "home": FOLDER_MODE,
    "mnt": FOLDER_MODE,
    "proc": FOLDER_MODE,
    "sys": FOLDER_MODE,
    "tmp": 0o1777,
}
MOUNT_FILES = ("etc/group", "etc/hosts", "etc/passwd", "etc/resolv.conf")


class ExportFormat(StrEnum):
    """What `imagekit export` writes: a folder (`ch-run DIR`) or a squashfs file (`enroot
    create`, `apptainer build`, `ch-run FILE.sqfs`)."""

    DIR = "dir"
    SQUASHFS = "squashfs"


@dataclass(frozen=True)
class Exported:
    """What an export wrote: where, what it holds, and how long it took."""

    path: Path
    export_format: ExportFormat
    image: str
    image_id: str
    size_bytes: int  # the file's (squashfs), or the sum of the files' sizes (dir)
    entries: int  # files, folders and links in the root filesystem
    skipped: int  # device nodes and FIFOs, which a user cannot make
    seconds: float

    def document(self) -> dict[str, str | int | float]:
        """The `--json` document."""
        return {
            "path": str(self.path),
            "format": str(self.export_format),
            "image": self.image,
            "image_id": self.image_id,
            "size_bytes": self.size_bytes,
            "entries": self.entries,
            "skipped_special_files": self.skipped,
            "seconds": round(self.seconds, 1),
        }

    def summary(self) -> str:
        """The line a person reads on stderr."""
        skipped = (
            f"; {self.skipped} device nodes and FIFOs skipped (a user cannot make them, and "
            "the runtimes bind /dev)"
            if self.skipped
            else ""
        )
        return (
            f"exported {self.image} to {self.path} ({self.export_format}): {self.entries} "
            f"entries, {self.size_bytes} bytes, in {self.seconds:.1f} s{skipped}"
        )


def default_out(image: str, export_format: ExportFormat) -> Path:
    """Where an export goes when `--out` is not given: in the current folder, the last part of
    the repository and the tag (`pytorch-2.13.0-cpu-py3.11-slim`, plus `.sqfs` for squashfs);
    `image-<id>` for an image named by its id, the digest for one named by digest only."""
    found = _IMAGE_ID.match(image)
    if found:
        stem = f"image-{found.group(1)[:SHORT_ID]}"
    else:
        ref = parse(image)
        version = ref.tag or ref.digest.replace(":", "-")[: len("sha256-") + SHORT_ID]
        stem = f"{ref.repository.rsplit('/', 1)[-1]}-{version}"
    return Path(stem + (SQUASHFS_SUFFIX if export_format is ExportFormat.SQUASHFS else ""))


def mksquashfs_argv(tool: str, tree: Path, out: Path, epoch: int) -> list[str]:
    """The mksquashfs command that makes `out` of the folder `tree`, the same bytes each time:
    owned by root (as the runtimes expect of an image), no extended attributes (a user's
    export has none worth keeping), the file system's own time fixed to `epoch`."""
    return [
        tool, str(tree), str(out), "-noappend", "-all-root", "-no-xattrs",
        "-mkfs-time", str(epoch), "-quiet",
    ]  # fmt: skip


def out_problem(destination: Path) -> tuple[str, str] | None:
    """What is wrong with writing an export to `destination`, and its remedy: an export never
    writes over anything, and goes into a folder that exists."""
    if destination.exists() or destination.is_symlink():
        return (
            f"{destination} exists; an export never writes over anything",
            "remove it, or pick another --out",
        )
    if not destination.parent.is_dir():
        return f"{destination.parent} is not a folder", "make it, or pick another --out"
    return None
