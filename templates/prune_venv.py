"""Prune a virtualenv for a runtime image; run in the builder stage (standard library only).

Takes out only what no program loads at run time, the split NVIDIA's own images make between
`runtime` and `devel`:
- debug sections of shared objects (`strip --strip-debug`: symbols stay, so backtraces still
  name functions), only where the base carries `strip`: the sections are found by reading the
  ELF headers here, and no build installs binutils for this (it cost 14-29 s of `apt-get` and
  a network access, for 27 KB on the CPU example; wheels on PyPI come stripped). Without
  `strip`, the bytes found are reported as `debug_left`;
- static archives that have a shared twin (`libcupti_static.a` beside `libcupti.so`): a
  runtime image has no linker, and the full image links against the shared library;
- byte-identical copies of one file in one folder, mostly a library under its several
  sonames (`libcupti.so`, `.so.12`, `.so.2025.1.1`; wheels cannot hold symlinks): kept once,
  the other names become symlinks to it.
- with `--pack-headers`, C/C++ headers (`torch/include`, `nvidia/*/include`): only compilers
  read them, and slim has none. They are kept, gzip-compressed (level 1) to about a sixth, in
  `<venv>/imagekit-headers.tar.gz`; the full flavour unpacks them (and so can anyone who adds
  a compiler to slim: `python -m tarfile -e /opt/venv/imagekit-headers.tar.gz /opt/venv`).
Writes what it did to `<venv>/imagekit-pruned.json` (or `--report NAME`), with the bytes of
each step under `steps`; the seconds of each go to the build log only (one line, `prune_venv
steps: {json}`, which `make bench` reads), so that the image holds the same bytes at every
build of the same inputs. The report is also the evidence
verify's `wheel-files` check weighs the venv against each wheel's RECORD with
(`imagekit.core.wheel_files`): every path is relative to VENV; `stripped` maps a file to the
bytes it lost, and `stripped_sha256` to its digests before and after (`{"before": "sha256=...",
"after": ...}`, spelled as RECORD spells them), so a stripped file still shows it is the one its
wheel installed; `static_removed`, `linked` and `headers_packed` (folders) name what the other
steps took out, moved or packed; `keys_removed` lists the private-key files the build deleted
just before (`--keys-removed FILE`, the NUL-separated list the Dockerfile's drop_private_keys
wrote).

`--leave-out NAME` (repeatable) first uninstalls a distribution the matrix leaves out of slim,
writing its exact `name==version` to `<venv>/imagekit-left-out.txt`: the full flavour installs
those very versions back.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
SHARED = re.compile(r"\.so(\.[0-9][0-9A-Za-z.]*)?$")


def debug_bytes(path: Path) -> int:
    """The bytes of a 64-bit ELF file's `.debug_*` / `.zdebug_*` sections, read from its section
    headers (what `strip --strip-debug` takes out); 0 for anything else."""
    with path.open("rb") as handle:
        ident = handle.read(64)
        if len(ident) < 64 or ident[:4] != ELF_MAGIC or ident[4] != 2:  # ELFCLASS64 only
            return 0
        order = "<" if ident[5] == 1 else ">"
        (shoff,) = struct.unpack_from(order + "Q", ident, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", ident, 0x3A)
        if not shoff or shentsize < 64 or shstrndx >= shnum:
            return 0
        handle.seek(shoff)
        table = handle.read(shentsize * shnum)
        if len(table) < shentsize * shnum:
            return 0
        sections = [
            struct.unpack_from(order + "IIQQQQ", table, i * shentsize) for i in range(shnum)
        ]
        names_at, names_size = sections[shstrndx][4], sections[shstrndx][5]
        handle.seek(names_at)
        names = handle.read(names_size)
    total = 0
    for name_at, _type, _flags, _addr, _offset, size in sections:
        name = names[name_at : names.find(b"\0", name_at)]
        if name.startswith((b".debug_", b".zdebug_")):
            total += size
    return total


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_sha256(path: Path) -> str:
    """The file's digest as a wheel's RECORD spells it: `sha256=<urlsafe base64, unpadded>`."""
    raw = bytes.fromhex(sha256(path))
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def files_of(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def strip_debug(
    root: Path, log: dict[str, int], left: dict[str, int], digests: dict[str, dict[str, str]]
) -> None:
    """Strip the debug sections of shared objects where `strip` is on PATH; else record them.
    Each stripped file's digests before and after go to `digests`."""
    strip = shutil.which("strip")
    for path in files_of(root):
        if not SHARED.search(path.name) or not (found := debug_bytes(path)):
            continue
        name = str(path.relative_to(root))
        if strip is None:
            left[name] = found
            continue
        before = path.stat().st_size
        mode = path.stat().st_mode
        was = record_sha256(path)
        subprocess.run([strip, "--strip-debug", str(path)], check=True)
        path.chmod(mode)
        log[name] = before - path.stat().st_size
        digests[name] = {"before": was, "after": record_sha256(path)}


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
HEADERS_ARCHIVE = "imagekit-headers.tar.gz"


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
    """Move the header folders into one gzip archive; returns the archive's size. The archive
    is the same bytes for the same headers: members in name order, their times the build's
    SOURCE_DATE_EPOCH (where set), no owner names, and no time in the gzip header."""
    import gzip
    import shutil
    import tarfile

    folders = header_dirs(root)
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")

    def same_bytes(member: tarfile.TarInfo) -> tarfile.TarInfo:
        member.uid = member.gid = 0
        member.uname = member.gname = ""
        member.mtime = int(epoch) if epoch.isdigit() else int(member.mtime)
        return member

    # gzip at level 1: 2.3 s for torch's 40 MB of headers (6.7 MB left), where xz took 10.4 s
    # to save 3.3 MB more, on the critical path of every BuildKit build of such a slim.
    # One `with` of several, unparenthesised: bases with Python 3.8 run this too.
    raw = (root / HEADERS_ARCHIVE).open("wb")
    packed = gzip.GzipFile(filename="", mode="wb", compresslevel=1, fileobj=raw, mtime=0)
    with raw, packed, tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for folder in folders:
            archive.add(folder, arcname=str(folder.relative_to(root)), filter=same_bytes)
    for folder in folders:
        log[str(folder.relative_to(root))] = sum(
            p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
        )
        shutil.rmtree(folder)
    return (root / HEADERS_ARCHIVE).stat().st_size


UV_CACHE_INFO = "uv_cache.json"


def drop_uv_cache_info(root: Path) -> int:
    """uv writes `uv_cache.json` into each dist-info: when it unpacked that wheel into its
    cache, the one thing in the venv that differs between two builds of the same inputs (and
    nothing reads it but `uv pip` deciding whether a local source changed). Each goes, with its
    line of the distribution's RECORD, so RECORD still lists exactly what is there. Returns the
    number removed."""
    removed = 0
    for info in sorted(root.glob(f"lib/python*/site-packages/*.dist-info/{UV_CACHE_INFO}")):
        record = info.parent / "RECORD"
        if record.is_file():
            entry = f"{info.parent.name}/{UV_CACHE_INFO},"
            lines = record.read_text(encoding="utf-8").splitlines(keepends=True)
            record.write_text("".join(x for x in lines if not x.startswith(entry)), "utf-8")
        info.unlink()
        removed += 1
    return removed


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


def keys_removed(root: Path, listing: Path | None) -> list[str]:
    """The files `listing` names (NUL-separated absolute paths), relative to `root`."""
    if listing is None:
        return []
    names = [os.fsdecode(n) for n in listing.read_bytes().split(b"\0") if n]
    # os.path, not Path.is_relative_to: the builder's Python may be 3.8 (Ubuntu 20.04).
    return sorted(os.path.relpath(n, root) if n.startswith(f"{root}/") else n for n in names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("venv", type=Path)
    parser.add_argument("--leave-out", action="append", default=[])
    parser.add_argument("--keep-static-archives", action="store_true")
    parser.add_argument("--pack-headers", action="store_true")
    parser.add_argument("--report", default="imagekit-pruned.json", help="written into VENV")
    parser.add_argument("--keys-removed", type=Path, help="private keys the build deleted")
    args = parser.parse_args()
    root = args.venv.resolve()
    removed_keys = keys_removed(root, args.keys_removed)
    if args.leave_out:
        leave_out(root, args.leave_out)
    uv_cache_info = drop_uv_cache_info(root)
    report: dict[str, dict[str, int]] = {
        "stripped": {},
        "debug_left": {},
        "static_removed": {},
        "linked": {},
        "headers_packed": {},
    }
    stripped_sha256: dict[str, dict[str, str]] = {}
    steps: dict[str, dict[str, int]] = {}
    seconds: dict[str, float] = {}

    def step(name: str, action: Callable[[], int]) -> None:
        """Run one pruning step, recording its seconds and the bytes it saved."""
        started = time.monotonic()
        steps[name] = {"bytes": action()}
        seconds[name] = round(time.monotonic() - started, 3)

    def total(part: str) -> int:
        return sum(report[part].values())

    def debug() -> int:
        strip_debug(root, report["stripped"], report["debug_left"], stripped_sha256)
        return total("stripped")

    def static() -> int:
        drop_static_twins(root, report["static_removed"])
        return total("static_removed")

    def duplicates() -> int:
        link_duplicates(root, report["linked"])
        return total("linked")

    archive = 0

    def headers() -> int:
        nonlocal archive
        archive = pack_headers(root, report["headers_packed"])
        return total("headers_packed") - archive

    step("debug_sections", debug)
    if not args.keep_static_archives:
        step("static_archives", static)
    step("duplicates", duplicates)
    if args.pack_headers:
        step("headers", headers)
    saved = int(sum(s["bytes"] for s in steps.values()))
    document: dict[str, object] = {
        "saved_bytes": saved,
        "headers_archive_bytes": archive,
        "steps": steps,
        **report,
        "stripped_sha256": stripped_sha256,
        "keys_removed": removed_keys,
        "uv_cache_info_removed": uv_cache_info,
    }
    (root / args.report).write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    timed = {name: {"seconds": seconds[name], **figures} for name, figures in steps.items()}
    print(f"prune_venv steps: {json.dumps(timed, sort_keys=True)}", file=sys.stderr)
    print(f"pruned {root}: {saved / 1e6:.1f} MB saved", file=sys.stderr)


if __name__ == "__main__":
    os.umask(0o022)
    main()
