"""Sort a virtualenv into one folder per layer; run in slim's builder stage (standard library
only, Python 3.8 or newer: the bases' own Python runs it).

`layer_venv.py VENV STAGING --slots nvidia-00,...,deps,triton,torch,imagekit` moves every file
and link of VENV into STAGING/<slot>/<its absolute path>, by the distribution that installed
it (each wheel's RECORD lists its files; a file it does not list, such as bytecode compiled
later, goes with the distribution that owns its folder or its source). The slots and their
order are imagekit's (`imagekit/core/venv_layers.py`): one NVIDIA distribution per `nvidia-NN`
slot, the CUDA toolkit's first and cuDNN and NCCL last; `deps` for every other dependency;
`triton`; `torch`; and `imagekit` for the venv itself and what no distribution installed.

Full's builder stage runs it too, over its overlay (`--at /opt/venv`: the overlay lies at
/tmp/overlay/opt/venv and lands at the venv's path): full's own packages, the left-out Triton and
what no distribution there installed (torch's unpacked headers, full's pruning report) each get
a layer, so that full's packages are the same layer in neighbouring releases.

Every file, link and folder moved gets the build's SOURCE_DATE_EPOCH as its time (the runtime
stage copies them as they are), so that the same wheel at the same version makes the same layer
in every image and every build. Bytecode is hash-based when that variable is set, so the times
are not what keeps it valid. `VENV/imagekit-layers.json` (in the `imagekit` slot) says what each
slot holds.

A slot that nothing falls into (the NVIDIA slots beyond a release's libraries, slim's Triton
where the matrix leaves it out, full's where slim keeps it) holds one empty file,
`VENV/.imagekit-unused-layers/<report's stem>.<slot>`: the legacy builder on the classic store
fails a build whose COPY of an empty folder is followed by another COPY ("failed to get layer
...: layer does not exist", moby/moby#40591), and the name keeps each such layer unlike every
other, slim's and full's included (moby/moby#37965).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
from pathlib import Path

# NVIDIA distributions that move with PyTorch releases more than with the CUDA toolkit, in the
# order they are laid down after the toolkit's own libraries.
LATER_NVIDIA = ("nvidia-cusparselt", "nvidia-nvshmem", "nvidia-cudnn", "nvidia-nccl")
TRITON = ("triton", "pytorch-triton")
REPORT = "imagekit-layers.json"
# Where an unused slot's one file lies, in the venv (the docstring says why).
UNUSED = ".imagekit-unused-layers"


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions(site: Path, venv: Path) -> dict[str, tuple[str, str, list[str]]]:
    """Each distribution in `site`: (name, version, the paths its RECORD lists, relative to
    `venv`)."""
    found = {}
    for info in sorted(site.glob("*.dist-info")):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        paths = []
        record = info / "RECORD"
        if record.is_file():
            with record.open(newline="", encoding="utf-8") as handle:
                for row in csv.reader(handle):
                    if row and row[0]:
                        path = os.path.normpath(os.path.join(str(site.relative_to(venv)), row[0]))
                        paths.append(path)
        found[normalized(name)] = (name, version, paths)
    return found


def nvidia_rank(name: str) -> tuple[int, str]:
    """Where an NVIDIA distribution lies among the NVIDIA slots: the toolkit's first."""
    for rank, prefix in enumerate(LATER_NVIDIA, start=1):
        if name.startswith(prefix):
            return rank, name
    return 0, name


def slot_of_each(names: list[str], slots: list[str]) -> dict[str, str]:
    """The slot of each distribution (normalised names)."""
    nvidia_slots = [s for s in slots if s.startswith("nvidia-")]
    nvidia = sorted((n for n in names if n.startswith(("nvidia-", "cuda-"))), key=nvidia_rank)
    chosen = {}
    for index, name in enumerate(nvidia if nvidia_slots else []):
        chosen[name] = nvidia_slots[min(index, len(nvidia_slots) - 1)]
    for name in names:
        if name in chosen:
            continue
        if name == "torch":
            chosen[name] = "torch"
        elif name.startswith(TRITON) and "triton" in slots:
            chosen[name] = "triton"
        else:
            chosen[name] = "deps"
    return chosen


class Owners:
    """Which distribution installed a path of the venv (relative paths)."""

    def __init__(self, dists: dict[str, tuple[str, str, list[str]]], site: str) -> None:
        self.site = site
        self.files = {}
        self.below: dict[str, set[str]] = {}  # a folder -> the distributions with files in it
        for key, (_, _, paths) in dists.items():
            for path in paths:
                self.files[path] = key
                parent = os.path.dirname(path)
                while self._inside_a_package(parent):
                    self.below.setdefault(parent, set()).add(key)
                    parent = os.path.dirname(parent)

    def _inside_a_package(self, folder: str) -> bool:
        """A folder under site-packages that is not site-packages' own `__pycache__`: its
        distributions are the ones its files came from."""
        if not folder.startswith(self.site + "/"):
            return False
        return not folder[len(self.site) + 1 :].startswith("__pycache__")

    def of(self, path: str) -> str | None:
        """The distribution of `path`; None where none can be told (the venv's own files)."""
        if path in self.files:
            return self.files[path]
        folder, name = os.path.split(path)
        if os.path.basename(folder) == "__pycache__":
            source = os.path.join(os.path.dirname(folder), name.split(".")[0] + ".py")
            if source in self.files:
                return self.files[source]
        while self._inside_a_package(folder):
            owners = self.below.get(folder, set())
            if len(owners) == 1:
                return next(iter(owners))
            folder = os.path.dirname(folder)
        return None


def entries(venv: Path) -> tuple[list[str], list[str]]:
    """Every file and link of `venv` (a link to a folder included), and every empty folder,
    relative to it, in name order."""
    files, empty = [], []
    for top, folders, names in os.walk(venv):
        here = os.path.relpath(top, venv)
        links = [f for f in folders if os.path.islink(os.path.join(top, f))]
        folders[:] = sorted(f for f in folders if f not in links)
        for name in sorted(names + links):
            files.append(os.path.normpath(os.path.join(here, name)))
        if not folders and not names and not links and here != ".":
            empty.append(here)
    return files, empty


def move(venv: Path, path: str, slot: Path, at: Path) -> None:
    """Move `venv/path` to `at/path` under `slot` (`slot/opt/venv/...`), making its folders
    with the modes they have here (above the venv, those of `at`'s own folders). The slot holds
    the venv's own folders too, so that the runtime stage's `COPY SLOT/ /` gives them the
    epoch's time, not the copy's."""
    parts = (at / path).parts[1:]
    for depth in range(1, len(parts)):
        made = slot.joinpath(*parts[:depth])
        if not made.is_dir():
            made.mkdir()
            here = Path("/").joinpath(*parts[:depth])
            inside = here == at or at in here.parents
            source = venv / here.relative_to(at) if inside else here
            os.chmod(made, os.stat(source).st_mode & 0o7777)
    os.rename(venv / path, slot.joinpath(*parts))


def clamp_times(root: Path, epoch: int) -> None:
    for top, folders, names in os.walk(root, topdown=False):
        for name in folders + names:
            os.utime(os.path.join(top, name), (epoch, epoch), follow_symlinks=False)
    os.utime(root, (epoch, epoch))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("venv", type=Path)
    parser.add_argument("staging", type=Path)
    parser.add_argument("--slots", required=True, help="the slot names, bottom to top")
    parser.add_argument("--at", type=Path, help="the venv's path in the image (default: VENV)")
    parser.add_argument("--report", default=REPORT, help="the report's name, in the venv")
    args = parser.parse_args()
    venv, staging = args.venv.resolve(), args.staging
    at = args.at or venv
    slots = args.slots.split(",")
    (site,) = sorted(venv.glob("lib/python*/site-packages"))
    dists = distributions(site, venv)
    owners = Owners(dists, str(site.relative_to(venv)))
    slot_of = slot_of_each(sorted(dists), slots)
    report = {s: {"distributions": [], "files": 0, "bytes": 0} for s in slots}
    for key, (name, version, _) in sorted(dists.items()):
        report[slot_of[key]]["distributions"].append(f"{name}=={version}")
    for slot in slots:
        (staging / slot).mkdir(parents=True, exist_ok=True)
    files, empty = entries(venv)
    for path in files:
        owner = owners.of(path)
        slot = slot_of[owner] if owner is not None else "imagekit"
        report[slot]["files"] += 1
        report[slot]["bytes"] += os.lstat(venv / path).st_size
        move(venv, path, staging / slot, at)
    for folder in empty:
        owner = owners.of(os.path.join(folder, "_"))
        slot = slot_of[owner] if owner is not None else "imagekit"
        move(venv, folder, staging / slot, at)
    own = staging / "imagekit" / at.relative_to("/")
    own.mkdir(parents=True, exist_ok=True)
    (own / args.report).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    for slot in slots:
        if not any((staging / slot).iterdir()):
            unused = staging / slot / at.relative_to("/") / UNUSED
            unused.mkdir(parents=True)
            (unused / f"{Path(args.report).stem}.{slot}").touch()
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    if epoch.isdigit():
        for slot in slots:
            clamp_times(staging / slot, int(epoch))
    summary = {s: f"{r['bytes'] / 1e6:.1f} MB" for s, r in report.items() if r["files"]}
    print(f"layer_venv: {json.dumps(summary)}", file=sys.stderr)


if __name__ == "__main__":
    os.umask(0o022)
    main()
