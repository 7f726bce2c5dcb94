"""Prune a virtualenv for a runtime image; run in the builder stage (standard library only).

Takes out only what no program loads at run time, the split NVIDIA's own images make between
`runtime` and `devel`:
- debug sections of shared objects (`strip --strip-debug`: symbols stay, so backtraces still
  name functions);
- static archives that have a shared twin (`libcupti_static.a` beside `libcupti.so`): a
  runtime image has no linker, and the full image links against the shared library;
- byte-identical copies of one file in one folder, mostly a library under its several
  sonames (`libcupti.so`, `.so.12`, `.so.2025.1.1`; wheels cannot hold symlinks): kept once,
  the other names become symlinks to it.
- with `--pack-headers`, C/C++ headers (`torch/include`, `nvidia/*/include`): only compilers
  read them, and slim has none. They are kept, xz-compressed to about a tenth, in
  `<venv>/imagekit-headers.tar.xz`; the full flavour unpacks them (and so can anyone who adds
  a compiler to slim: `python -m tarfile -e /opt/venv/imagekit-headers.tar.xz /opt/venv`).
Writes what it did to `<venv>/imagekit-pruned.json` (or `--report NAME`).

`--leave-out NAME` (repeatable) first uninstalls a distribution the matrix leaves out of slim,
writing its exact `name==version` to `<venv>/imagekit-left-out.txt`: the full flavour installs
those very versions back.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
SHARED = re.compile(r"\.so(\.[0-9][0-9A-Za-z.]*)?$")


def is_elf(path: Path) -> bool:
    with path.open("rb") as handle:
        return handle.read(4) == ELF_MAGIC


def has_debug_sections(path: Path) -> bool:
    out = subprocess.run(
        ["readelf", "--section-headers", "--wide", str(path)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return " .debug_" in out


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def files_of(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def strip_debug(root: Path, log: dict[str, int]) -> None:
    for path in files_of(root):
        if SHARED.search(path.name) and is_elf(path) and has_debug_sections(path):
            before = path.stat().st_size
            mode = path.stat().st_mode
            subprocess.run(["strip", "--strip-debug", str(path)], check=True)
            path.chmod(mode)
            log[str(path.relative_to(root))] = before - path.stat().st_size


def drop_static_twins(root: Path, log: dict[str, int]) -> None:
    for path in files_of(root):
        match = re.fullmatch(r"(lib.+?)_static\.a", path.name)
        if match and any(path.parent.glob(f"{match.group(1)}.so*")):
            log[str(path.relative_to(root))] = path.stat().st_size
            path.unlink()


def link_duplicates(root: Path, log: dict[str, int]) -> None:
    by_folder: dict[tuple[Path, int], list[Path]] = {}
    for path in files_of(root):
        if path.stat().st_size >= 1 << 16:
            by_folder.setdefault((path.parent, path.stat().st_size), []).append(path)
    for (_, size), paths in by_folder.items():
        if len(paths) < 2:
            continue
        groups: dict[str, list[Path]] = {}
        for path in paths:
            groups.setdefault(sha256(path), []).append(path)
        for same in groups.values():
            if len(same) < 2:
                continue
            # Keep the most specific name (`libx.so.2025.1.1`); the others point at it.
            keep = max(same, key=lambda p: (len(p.name), p.name))
            for path in same:
                if path != keep:
                    path.unlink()
                    path.symlink_to(keep.name)
                    log[str(path.relative_to(root))] = size


HEADER_SUFFIXES = {".h", ".hpp", ".hxx", ".cuh", ".inl", ".inc", ".def"}
HEADERS_ARCHIVE = "imagekit-headers.tar.xz"


def header_dirs(root: Path) -> list[Path]:
    """`include` folders of packages in site-packages (`torch/include`, `nvidia/cu13/include`)."""
    found = []
    for site in sorted(root.glob("lib/python*/site-packages")):
        for pattern in ("*/include", "*/*/include"):
            for folder in sorted(site.glob(pattern)):
                if folder.is_dir() and any(
                    p.suffix in HEADER_SUFFIXES for p in folder.rglob("*") if p.is_file()
                ):
                    found.append(folder)
    return found


def pack_headers(root: Path, log: dict[str, int]) -> int:
    """Move the header folders into one xz archive; returns the archive's size."""
    import shutil
    import tarfile

    folders = header_dirs(root)
    with tarfile.open(root / HEADERS_ARCHIVE, "w:xz", format=tarfile.PAX_FORMAT) as archive:
        for folder in folders:
            archive.add(folder, arcname=str(folder.relative_to(root)))
    for folder in folders:
        log[str(folder.relative_to(root))] = sum(
            p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
        )
        shutil.rmtree(folder)
    return (root / HEADERS_ARCHIVE).stat().st_size


def leave_out(root: Path, names: list[str]) -> None:
    from importlib import metadata

    pins = []
    for name in names:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            sys.exit(f"prune_venv: --leave-out {name}: no such distribution in {root}")
    subprocess.run([sys.executable, "-m", "pip", "uninstall", "--yes", *names], check=True)
    (root / "imagekit-left-out.txt").write_text("".join(f"{pin}\n" for pin in pins))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("venv", type=Path)
    parser.add_argument("--leave-out", action="append", default=[])
    parser.add_argument("--keep-static-archives", action="store_true")
    parser.add_argument("--pack-headers", action="store_true")
    parser.add_argument("--report", default="imagekit-pruned.json", help="written into VENV")
    args = parser.parse_args()
    root = args.venv.resolve()
    if args.leave_out:
        leave_out(root, args.leave_out)
    report: dict[str, dict[str, int]] = {
        "stripped": {},
        "static_removed": {},
        "linked": {},
        "headers_packed": {},
    }
    strip_debug(root, report["stripped"])
    if not args.keep_static_archives:
        drop_static_twins(root, report["static_removed"])
    link_duplicates(root, report["linked"])
    archive = pack_headers(root, report["headers_packed"]) if args.pack_headers else 0
    saved = sum(sum(part.values()) for part in report.values()) - archive
    document: dict[str, object] = {"saved_bytes": saved, "headers_archive_bytes": archive, **report}
    (root / args.report).write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"pruned {root}: {saved / 1e6:.1f} MB saved", file=sys.stderr)


if __name__ == "__main__":
    os.umask(0o022)
    main()
