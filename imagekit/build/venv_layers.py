"""How slim's virtualenv is laid out in layers, so that neighbouring images share bytes. Pure.

A node that holds torch 2.13.0 for CUDA 13.0 and pulls 2.14.1 needs only what differs: torch,
cuDNN and NCCL. The CUDA toolkit's libraries (pinned by `cuda-toolkit[...]==13.0.3` in both),
cuSPARSELt and NVSHMEM are the same files. With the venv in one layer, any change is a new
gigabyte layer; so slim's builder stage sorts the venv by distribution (each installed wheel's
RECORD says which files are its) into one folder per layer, their file times clamped to the
build's epoch, and the runtime stage copies each folder in its own step. A layer's bytes then
depend only on what it holds: the same wheel at the same version is the same layer, and its
digest is shared by every image and registry that has it.

The order runs from what changes least to what changes most, because a classic-store engine
keeps a layer only on top of the layers below it (a content-addressed store, as containerd's
or a registry's, keeps any layer it has seen wherever it lies):
1. `nvidia-00` ... : one NVIDIA (or `cuda-*`) distribution each, those the CUDA toolkit pins
   first, then cuSPARSELt and NVSHMEM, then cuDNN and NCCL, which move with PyTorch releases
   (CUDA cells only; the last slot takes any beyond their number);
2. `deps`: every other dependency (numpy, sympy, pip ...);
3. `triton` (CUDA cells only), then `torch`;
4. `imagekit`: the venv itself (`bin/python`, `pyvenv.cfg`) and imagekit's own files (the
   start-up hook, the pruning report, packed headers), which are per image.

Full's overlay (its own packages, the Triton slim left out, torch's headers unpacked for its
compilers) is sorted the same way, into `deps`, `triton` and `imagekit`: full's packages are
constrained to slim's versions, so they are the same layer in neighbouring releases, and only
Triton and the headers move with torch.

`templates/layer_venv.py` does the sorting inside the image (standard library only); it takes
the slot names from here (`--slots`), so the Dockerfile's COPY steps and the folders agree.
"""

from __future__ import annotations

# How many NVIDIA distributions get a layer of their own. torch 2.13/2.14 for CUDA 13.0 install
# 16 (the toolkit's 11 libraries, its meta-package, cuDNN, cuSPARSELt, NCCL, NVSHMEM); an
# unused slot is a layer of one empty file (templates/layer_venv.py says why not an empty
# layer), and the last slot takes the rest where there are more.
NVIDIA_SLOTS = 20
DEPS, TRITON, TORCH, IMAGEKIT = "deps", "triton", "torch", "imagekit"
# Where the builder stage leaves the folders, one per slot, each a tree from / (opt/venv/...).
STAGING = "/tmp/imagekit/layers"
# Where full's builder stage leaves its overlay's, and the report that says what each holds.
FULL_STAGING = "/tmp/full-layers"
FULL_LAYERS_REPORT = "imagekit-layers-full.json"


def nvidia_slot(index: int) -> str:
    """The name of the `index`th NVIDIA layer (`nvidia-00`)."""
    return f"nvidia-{index:02d}"


def venv_slots(cuda: bool) -> tuple[str, ...]:
    """The venv's layers, bottom to top, for a CUDA cell or a CPU one."""
    nvidia = tuple(nvidia_slot(i) for i in range(NVIDIA_SLOTS)) if cuda else ()
    return (*nvidia, DEPS, *((TRITON,) if cuda else ()), TORCH, IMAGEKIT)


def overlay_slots(cuda: bool) -> tuple[str, ...]:
    """Full's overlay's layers, bottom to top: its own packages, Triton (CUDA cells), then what
    no distribution of the overlay installed (torch's headers, full's pruning report)."""
    return (DEPS, *((TRITON,) if cuda else ()), IMAGEKIT)
