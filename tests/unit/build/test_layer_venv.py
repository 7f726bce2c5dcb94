"""layer_venv.py, the builder-stage script that sorts slim's virtualenv into one folder per
layer (imagekit/build/venv_layers.py), run on a virtualenv made of files as wheels install them;
and the Dockerfile's one COPY per slot."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.build.render import render_image
from imagekit.build.venv_layers import (
    FULL_LAYERS_REPORT,
    FULL_STAGING,
    NVIDIA_SLOTS,
    STAGING,
    nvidia_slot,
    overlay_slots,
    venv_slots,
)
from imagekit.matrix.load import load_matrix

SCRIPT = Path(__file__).resolve().parents[3] / "templates" / "layer_venv.py"
GOLDEN_MATRIX = SCRIPT.parents[1] / "tests" / "golden" / "matrix.yaml"
SITE = "lib/python3.11/site-packages"
EPOCH = 1_700_000_000
SLOTS = ["nvidia-00", "nvidia-01", "nvidia-02", "deps", "triton", "torch", "imagekit"]


def wheel(venv: Path, name: str, version: str, files: dict[str, bytes]) -> None:
    """Install `files` (paths relative to site-packages) as a wheel does: with a RECORD."""
    site = venv / SITE
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Name: {name}\nVersion: {version}\n")
    listed = [*files, f"{info.name}/METADATA", f"{info.name}/RECORD"]
    for path, data in files.items():
        target = (site / path).resolve()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (info / "RECORD").write_text("".join(f"{p},,\n" for p in listed))


def make_venv(root: Path, torch: str = "2.14.1", cudnn: str = "9.24.0.43") -> Path:
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "include").mkdir()
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")
    (venv / "lib64").symlink_to("lib")
    wheel(venv, "nvidia_cublas", "13.1.0.3", {"nvidia/cu13/lib/libcublas.so.13": b"cublas"})
    wheel(venv, "nvidia_cufft", "12.0.0.61", {"nvidia/cu13/lib/libcufft.so.12": b"cufft"})
    wheel(venv, "nvidia_cudnn_cu13", cudnn, {"nvidia/cudnn/lib/libcudnn.so.9": cudnn.encode()})
    wheel(venv, "nvidia_nccl_cu13", "2.30.7", {"nvidia/nccl/lib/libnccl.so.2": b"nccl"})
    wheel(venv, "typing_extensions", "4.15.0", {"typing_extensions.py": b"# te\n"})
    wheel(venv, "triton", "3.6.0", {"triton/__init__.py": b"# triton\n"})
    files = {"torch/__init__.py": torch.encode(), "../../../bin/torchrun": b"#!python\n"}
    wheel(venv, "torch", torch, files)
    site = venv / SITE
    # Bytecode compiled after the install, which no RECORD lists.
    (site / "torch" / "__pycache__").mkdir()
    (site / "torch" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"pyc")
    (site / "__pycache__").mkdir()
    (site / "__pycache__" / "typing_extensions.cpython-311.pyc").write_bytes(b"pyc")
    (site / "__pycache__" / "imagekit_site.cpython-311.pyc").write_bytes(b"pyc")
    (site / "imagekit_site.py").write_text("# hook\n")
    (venv / "imagekit-pruned.json").write_text("{}\n")
    for top, folders, names in os.walk(venv):
        for name in folders + names:  # the install's own times, which must not reach a layer
            os.utime(os.path.join(top, name), (EPOCH + 12345, EPOCH + 12345), follow_symlinks=False)
    return venv


def run_script(venv: Path, staging: Path, slots: list[str], *options: str) -> None:
    subprocess.run(
        [sys.executable, str(SCRIPT), str(venv), str(staging), "--slots", ",".join(slots),
         *options],
        check=True, env={**os.environ, "SOURCE_DATE_EPOCH": str(EPOCH)},
    )  # fmt: skip


def golden_dockerfile(name: str) -> str:
    """The Dockerfile of the golden matrix's image `name`."""
    plan = next(p for p in load_matrix(GOLDEN_MATRIX).plans if p.name == name)
    return render_image(plan).dockerfile


def layer(venv: Path, staging: Path, slots: list[str] = SLOTS) -> dict:
    run_script(venv, staging, slots)
    return json.loads((in_slot(staging, "imagekit", venv) / "imagekit-layers.json").read_text())


def in_slot(staging: Path, slot: str, venv: Path) -> Path:
    """Where the venv's paths lie in a slot: under their absolute path (COPY SLOT/ /)."""
    return staging / slot / venv.relative_to("/")


def tree(folder: Path) -> dict[str, tuple]:
    """Every path under `folder`: its kind, mode, time and bytes (or link target)."""
    found = {}
    for top, folders, names in os.walk(folder):
        for name in folders + names:
            path = Path(top, name)
            info = path.lstat()
            what = os.readlink(path) if path.is_symlink() else (
                path.read_bytes() if path.is_file() else "dir"
            )  # fmt: skip
            found[str(path.relative_to(folder))] = (info.st_mode, int(info.st_mtime), what)
    return found


def test_each_file_goes_to_the_layer_of_the_distribution_that_installed_it(tmp_path: Path) -> None:
    venv = make_venv(tmp_path)
    before = {p for p in tree(venv) if not (venv / p).is_dir() or (venv / p).is_symlink()}
    report = layer(venv, tmp_path / "layers")

    where = {
        slot: {
            p
            for p, (_, _, what) in tree(in_slot(tmp_path / "layers", slot, venv)).items()
            if what != "dir"
        }
        for slot in SLOTS
    }
    installed = {s: {p for p in paths if ".dist-info/" not in p} for s, paths in where.items()}
    # The toolkit's libraries first, name by name; cuDNN and NCCL last (the last slot takes
    # what is beyond the slots' number).
    assert installed["nvidia-00"] == {f"{SITE}/nvidia/cu13/lib/libcublas.so.13"}
    assert installed["nvidia-01"] == {f"{SITE}/nvidia/cu13/lib/libcufft.so.12"}
    assert installed["nvidia-02"] == {
        f"{SITE}/nvidia/cudnn/lib/libcudnn.so.9", f"{SITE}/nvidia/nccl/lib/libnccl.so.2"
    }  # fmt: skip
    assert f"{SITE}/nvidia_cublas-13.1.0.3.dist-info/RECORD" in where["nvidia-00"]
    assert f"{SITE}/typing_extensions.py" in where["deps"]
    assert f"{SITE}/__pycache__/typing_extensions.cpython-311.pyc" in where["deps"]
    assert f"{SITE}/triton/__init__.py" in where["triton"]
    assert {f"{SITE}/torch/__init__.py", f"{SITE}/torch/__pycache__/__init__.cpython-311.pyc",
            "bin/torchrun"} <= where["torch"]  # fmt: skip
    assert {"pyvenv.cfg", "bin/python", "lib64", "imagekit-pruned.json", "imagekit-layers.json",
            f"{SITE}/imagekit_site.py", f"{SITE}/__pycache__/imagekit_site.cpython-311.pyc"} <= (
        where["imagekit"]
    )  # fmt: skip
    own = in_slot(tmp_path / "layers", "imagekit", venv)
    assert (own / "include").is_dir()  # an empty folder too
    assert (own / "lib64").is_symlink()
    # Nothing lost, nothing twice.
    moved = [p for paths in where.values() for p in paths]
    assert sorted(moved) == sorted(before | {"imagekit-layers.json"})
    assert report["nvidia-02"]["distributions"] == [
        "nvidia_cudnn_cu13==9.24.0.43", "nvidia_nccl_cu13==2.30.7"
    ]  # fmt: skip
    assert report["torch"]["distributions"] == ["torch==2.14.1"] and report["torch"]["files"] == 5


def test_every_file_link_and_folder_takes_the_epoch_as_its_time(tmp_path: Path) -> None:
    layer(make_venv(tmp_path), tmp_path / "layers")
    times = {m for slot in SLOTS for (_, m, _) in tree(tmp_path / "layers" / slot).values()}
    assert times == {EPOCH}


def test_a_wheel_at_the_same_version_is_the_same_layer_in_a_neighbouring_venv(
    tmp_path: Path,
) -> None:
    """Two venvs that differ in torch and cuDNN, installed at other times: every other slot is
    the same files, modes and times; the slots of what differs are not."""
    first = make_venv(tmp_path / "a")
    second = make_venv(tmp_path / "b", torch="2.13.0", cudnn="9.20.0.48")
    os.utime(second / "pyvenv.cfg", (EPOCH + 999, EPOCH + 999))
    slots = [*(nvidia_slot(i) for i in range(4)), "deps", "triton", "torch", "imagekit"]
    layer(first, tmp_path / "a" / "layers", slots)
    layer(second, tmp_path / "b" / "layers", slots)
    same = {
        s
        for s in slots
        if tree(in_slot(tmp_path / "a" / "layers", s, first))
        == tree(in_slot(tmp_path / "b" / "layers", s, second))
    }
    # cuDNN is nvidia-02, NCCL nvidia-03; the report in imagekit's slot names the versions.
    assert same == {"nvidia-00", "nvidia-01", "nvidia-03", "deps", "triton"}


def test_a_cpu_venv_has_no_nvidia_or_triton_slot(tmp_path: Path) -> None:
    venv = make_venv(tmp_path)
    report = layer(venv, tmp_path / "layers", ["deps", "torch", "imagekit"])
    assert "nvidia_cublas==13.1.0.3" in report["deps"]["distributions"]
    assert "triton==3.6.0" in report["deps"]["distributions"]


def test_the_slots_run_from_what_changes_least_to_what_changes_most() -> None:
    assert venv_slots(cuda=False) == ("deps", "torch", "imagekit")
    cuda = venv_slots(cuda=True)
    assert cuda[:NVIDIA_SLOTS] == tuple(f"nvidia-{i:02d}" for i in range(NVIDIA_SLOTS))
    assert cuda[NVIDIA_SLOTS:] == ("deps", "triton", "torch", "imagekit")


def test_an_unused_slot_holds_one_empty_file_that_names_it(tmp_path: Path) -> None:
    """The legacy builder on the classic store fails a COPY of an empty folder followed by
    another COPY (moby/moby#40591): an unused slot holds one file, named after its slot and its
    report, so that no slot's layer is empty or like another's (slim's or full's)."""
    venv = make_venv(tmp_path)
    slots = [*(nvidia_slot(i) for i in range(6)), "deps", "triton", "torch", "imagekit"]
    report = layer(venv, tmp_path / "layers", slots)
    layers = {s: tree(in_slot(tmp_path / "layers", s, venv)) for s in slots}
    # Four NVIDIA distributions: nvidia-04 and nvidia-05 are unused.
    for slot in ("nvidia-04", "nvidia-05"):
        assert report[slot]["distributions"] == []
        assert layers[slot] == {
            ".imagekit-unused-layers": (layers[slot][".imagekit-unused-layers"][0], EPOCH, "dir"),
            f".imagekit-unused-layers/imagekit-layers.{slot}": (0o100644, EPOCH, b""),
        }
    assert layers["nvidia-04"] != layers["nvidia-05"]
    # A slot in use holds only what it was given.
    for slot in ("nvidia-03", "deps", "triton", "torch", "imagekit"):
        assert not any(".imagekit-unused-layers" in p for p in layers[slot])
    # Full's overlay, whose Triton slim had kept: its own name, unlike slim's unused slots.
    full = overlay(tmp_path / "full", "2.14.1", "3.8.0")
    shutil.rmtree(full / SITE / "triton-3.8.0.dist-info")
    shutil.rmtree(full / SITE / "triton")
    staging = tmp_path / "full" / "layers"
    run_script(full, staging, list(overlay_slots(cuda=True)), "--at", "/opt/venv",
               "--report", FULL_LAYERS_REPORT)  # fmt: skip
    assert set(tree(staging / "triton")) == {
        "opt", "opt/venv", "opt/venv/.imagekit-unused-layers",
        "opt/venv/.imagekit-unused-layers/imagekit-layers-full.triton",
    }  # fmt: skip


@pytest.mark.parametrize("cuda", [True, False])
def test_slim_copies_each_slot_in_its_own_step_in_order(cuda: bool) -> None:
    dockerfile = golden_dockerfile("2.14.1-cu130-py3.12-slim" if cuda else "2.13.0-cpu-py3.11-slim")
    copies = [line.split()[2] for line in dockerfile.splitlines() if "COPY --from=builder" in line]
    assert copies == [f"{STAGING}/{slot}/" for slot in venv_slots(cuda=cuda)]
    assert f"--slots {','.join(venv_slots(cuda=cuda))}" in dockerfile


def overlay(root: Path, torch: str, triton: str) -> Path:
    """Full's overlay as its builder stage makes it (a venv's tree under a root of its own):
    full's own packages, the Triton slim left out, and torch's headers unpacked from slim's
    tarball, which no RECORD of the overlay lists."""
    venv = root / "overlay" / "opt" / "venv"
    wheel(venv, "jupyterlab", "4.6.6", {"jupyterlab/__init__.py": b"# lab\n",
                                        "../../../bin/jupyter-lab": b"#!python\n"})  # fmt: skip
    wheel(venv, "triton", triton, {"triton/__init__.py": triton.encode()})
    headers = venv / SITE / "torch" / "include" / "ATen"
    headers.mkdir(parents=True)
    (headers / "ATen.h").write_text(f"// torch {torch}\n")
    (venv / "imagekit-pruned-full.json").write_text(f'{{"torch": "{torch}"}}\n')
    return venv


def test_full_overlay_lands_at_the_venv_path_and_its_own_packages_are_one_shared_layer(
    tmp_path: Path,
) -> None:
    """Full's overlay of two neighbouring releases (other torch headers and Triton): its own
    packages are the same layer in both, at the venv's path in the image; Triton and what no
    distribution of the overlay installed (torch's headers, the pruning report) are not."""
    slots = list(overlay_slots(cuda=True))
    staged = {}
    for torch, triton in (("2.13.0", "3.7.1"), ("2.14.1", "3.8.0")):
        venv = overlay(tmp_path / torch, torch, triton)
        staging = tmp_path / torch / "layers"
        run_script(venv, staging, slots, "--at", "/opt/venv", "--report", FULL_LAYERS_REPORT)
        assert not any(p.is_file() for p in venv.rglob("*"))  # everything moved
        staged[torch] = {s: tree(staging / s) for s in slots}
    a, b = staged["2.13.0"], staged["2.14.1"]
    assert a["deps"] == b["deps"] and a["triton"] != b["triton"] and a["imagekit"] != b["imagekit"]
    assert f"opt/venv/{SITE}/jupyterlab/__init__.py" in a["deps"]
    assert "opt/venv/bin/jupyter-lab" in a["deps"]
    assert f"opt/venv/{SITE}/torch/include/ATen/ATen.h" in a["imagekit"]
    own = {"opt/venv/imagekit-pruned-full.json", f"opt/venv/{FULL_LAYERS_REPORT}"}
    assert own <= set(a["imagekit"])
    # /opt and /opt/venv come with each layer, with the epoch's time and the image's modes.
    assert {m for slot in a.values() for (_, m, _) in slot.values()} == {EPOCH}
    assert a["deps"]["opt"][0] & 0o7777 == 0o755


@pytest.mark.parametrize("cuda", [True, False])
def test_full_copies_its_overlay_in_a_step_per_slot_in_order(cuda: bool) -> None:
    dockerfile = golden_dockerfile("2.14.1-cu130-py3.12-full" if cuda else "2.13.0-cpu-py3.11-full")
    copies = [line.split()[3] for line in dockerfile.splitlines() if "--from=full-builder" in line]
    slots = overlay_slots(cuda=cuda)
    assert copies[: len(slots)] == [f"{FULL_STAGING}/{slot}/" for slot in slots]
    assert f"--slots {','.join(slots)} --report {FULL_LAYERS_REPORT}" in dockerfile
