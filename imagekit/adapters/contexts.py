"""Adapter: build-context folders on disk, written whole from what `build/context.py` says they
hold, and compared with a fresh render.

A run's contexts go through its run store (`RunFolder.write_context`, under
`results/<run-id>/contexts/`); `ContextFolder` writes them into a folder of the user's
(`imagekit render --out`, `imagekit bake --contexts`). Both write with `write_folder`, so a
context has the same files, bytes and modes wherever it is written.
"""

from __future__ import annotations

import difflib
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from imagekit.build.context import (
    INSTALLER,
    PLAN_FILE,
    STATIC_FILES,
    STATIC_MANIFEST,
    ContextInputs,
    rendered_contexts,
    static_manifest_text,
)
from imagekit.build.render import RenderOptions
from imagekit.errors import InputError
from imagekit.kernel.store import ContextFile
from imagekit.matrix.plan import ImagePlan


def _safe_child(root: Path, name: str) -> Path:
    """`root/name`, refusing any name that would land outside `root`."""
    target = (root / name).resolve()
    if root.resolve() not in target.parents:
        raise InputError(f"image name {name!r} would write outside {root}")
    return target


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)  # wheels are big: share them when the filesystem allows
    except OSError:
        shutil.copy2(source, target)


def write_folder(root: Path, name: str, files: Mapping[str, ContextFile]) -> Path:
    """Write the context `files` to `root/<name>/` and return that folder. The folder is
    replaced whole, so no stale file from an earlier render remains."""
    folder = _safe_child(root, name)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for relative, file in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if file.source is not None:
            _link_or_copy(file.source, path)
        else:
            path.write_text(file.text or "", encoding="utf-8")
        if file.mode is not None:
            path.chmod(file.mode)
    return folder


@dataclass(frozen=True)
class ContextFolder:
    """A folder of the user's that build contexts are written into, one folder per image."""

    root: Path

    def write_context(self, name: str, files: Mapping[str, ContextFile]) -> Path:
        """Write image `name`'s context to `root/<name>/`, replacing it whole; the folder."""
        return write_folder(self.root, name, files)


def render_tree(
    plans: list[ImagePlan], options: RenderOptions, inputs: ContextInputs, out_dir: Path
) -> list[Path]:
    """Render and write the build context of every plan; the folders written."""
    folder = ContextFolder(out_dir)
    return [
        folder.write_context(r.plan.name, files)
        for r, files in rendered_contexts(plans, options, inputs)
    ]


def check_tree(
    plans: list[ImagePlan], options: RenderOptions, inputs: ContextInputs, out_dir: Path
) -> tuple[list[str], bool]:
    """`imagekit render --check`: what to say (each difference, then the count and the way
    out, or that every image matches) and whether `out_dir` holds a fresh render."""
    differences = compare_tree(plans, options, inputs, out_dir)
    if differences:
        summary = f"{out_dir}: {len(differences)} differences; re-render with `make goldens`"
        return [*differences, summary], False
    return [f"{out_dir}: {len(plans)} images match a fresh render"], True


def compare_tree(
    plans: list[ImagePlan],
    options: RenderOptions,
    inputs: ContextInputs,
    out_dir: Path,
    *,
    static_manifest: bool | None = None,
) -> list[str]:
    """Differences between a fresh render of `plans` and what `out_dir` holds (none: equal).

    The static files (`STATIC_FILES`, verbatim from templates/) are compared as files
    when `static_manifest` is False, and by sha256 against each folder's
    `static.sha256` when it is True (a golden folder: a missing manifest is a
    difference). None, the default, uses the manifest where a folder has one, so
    `imagekit render --check` works on a rendered out dir and on the goldens alike.
    """
    differences = []
    for rendered, files in rendered_contexts(plans, options, inputs):
        folder = out_dir / rendered.plan.name
        manifest = folder / STATIC_MANIFEST
        by_hash = manifest.is_file() if static_manifest is None else static_manifest
        # The rendered text files; the external ones (uv, wheels, the CA) are inputs.
        expected = {n: f.text for n, f in files.items() if f.text is not None}
        if by_hash:
            static = {n: t for n, t in expected.items() if n in STATIC_FILES}
            expected = {n: t for n, t in expected.items() if n not in STATIC_FILES}
            differences += _compare_manifest(manifest, static)
        for name, text in sorted(expected.items()):
            path = folder / name
            if not path.is_file():
                differences.append(f"{path}: missing")
                continue
            current = path.read_text(encoding="utf-8")
            if current != text:
                diff = difflib.unified_diff(
                    current.splitlines(), text.splitlines(), str(path), "fresh render", lineterm=""
                )
                differences.append("\n".join(diff))
    return differences


def read_static_manifest(path: Path) -> dict[str, str]:
    """A `static.sha256` manifest as {name: sha256}."""
    return _manifest_entries(path.read_text(encoding="utf-8"))


def _manifest_entries(text: str) -> dict[str, str]:
    entries = {}
    for line in text.splitlines():
        if line.strip():
            sha, _, name = line.partition("  ")
            entries[name.strip()] = sha.strip()
    return entries


def _compare_manifest(manifest: Path, static: dict[str, str]) -> list[str]:
    """Differences between a folder's static manifest and the fresh render's static files."""
    if not manifest.is_file():
        return [f"{manifest}: missing"] if static else []
    listed = read_static_manifest(manifest)
    fresh = _manifest_entries(static_manifest_text(static))
    differences = []
    for name in sorted(static.keys() | listed.keys()):
        if name not in listed:
            differences.append(f"{manifest}: {name} is rendered but not listed")
        elif name not in static:
            differences.append(f"{manifest}: {name} is listed but not rendered")
        elif listed[name] != fresh[name]:
            differences.append(f"{manifest}: {name} is {listed[name]}, fresh render {fresh[name]}")
    return differences


def swap_static_for_manifest(out_dir: Path) -> list[Path]:
    """In each rendered image folder of `out_dir`, replace the static files by a
    `static.sha256` manifest and drop the installer binary (how tests/golden/ is stored;
    `make goldens` calls this after `imagekit render`). The manifests written."""
    written = []
    for folder in sorted(p.parent for p in out_dir.glob(f"*/{PLAN_FILE}")):
        static = {
            p.name: p.read_text(encoding="utf-8")
            for p in sorted(folder.iterdir())
            if p.name in STATIC_FILES and p.is_file()
        }
        manifest = folder / STATIC_MANIFEST
        manifest.write_text(static_manifest_text(static), encoding="utf-8")
        for name in static:
            (folder / name).unlink()
        # The installer binary is an input like a wheel, not rendered text: its digest is in
        # the plan file's input hash.
        (folder / INSTALLER).unlink(missing_ok=True)
        written.append(manifest)
    return written
