"""imagekit's start-up hook for Python in its images, loaded by `imagekit-site.pth`.

It tells the user at once what would otherwise surface later as an obscure failure:

- a container started with less than 1 GiB of /dev/shm (Docker's default is 64 MB), where
  DataLoader workers die of a bus error and NCCL fails to set up its shared memory: one
  warning line from the container's main process when it imports torch (a Python that never
  does, `python -c 'print(1)'`, is told nothing), naming `--shm-size`, `--ipc=host` and how to
  silence it;
- in an image without a C++ compiler (`IMAGEKIT_TORCH_COMPILE=no`, as its
  `io.imagekit.torch-compile` label says), the first `torch.compile` with the default
  backend, which would end in inductor's `InvalidCxxCompiler`: one line naming the ways out.

Every Python start in the image runs this, so it stays cheap: a getpid() and at most one
statvfs() call, and the torch hook exists only where torch.compile cannot work. It never
raises: a start-up hook that breaks Python would be worse than a missing warning.
"""

from __future__ import annotations

import os
import sys

# No other import at start: `typing` alone costs about 8 ms of every Python start (measured
# with -X importtime in the slim image); annotations below are never evaluated.

MIN_SHM_BYTES = 1 << 30
# The environment switch: the full image's entrypoint checks /dev/shm itself and sets it to
# 0, and so do users who know; this module sets it for its children, so it warns once.
SHM_SWITCH = "IMAGEKIT_SHM_CHECK"
COMPILE_SWITCH = "IMAGEKIT_TORCH_COMPILE"
COMPILE_NOTICE = (
    "imagekit: this image carries no C++ compiler (io.imagekit.torch-compile=no), so "
    "torch.compile's default backend, inductor, cannot compile here. Use "
    'torch.compile(model, backend="aot_eager") (no code generation), or the full image '
    "of the same tag, which compiles."
)


_started: list[bool] = []


def start() -> None:
    """Run both checks, once per interpreter: site.py may read the .pth twice (a venv's
    lib64 -> lib link names the same site-packages folder twice)."""
    if _started:
        return
    _started.append(True)
    try:
        _check_shm()
        if os.environ.get(COMPILE_SWITCH) == "no":
            sys.meta_path.insert(0, _TorchCompileNotice())
    except Exception:
        pass


def _is_main_process() -> bool:
    """The container's own process: PID 1, or the child of an init (`--init`, tini)."""
    return os.getpid() == 1 or os.getppid() == 1


def _check_shm() -> None:
    if os.environ.get(SHM_SWITCH) == "0" or not _is_main_process():
        return
    os.environ[SHM_SWITCH] = "0"
    try:
        stats = os.statvfs("/dev/shm")
    except OSError:
        return
    size = stats.f_frsize * stats.f_blocks
    if size < MIN_SHM_BYTES:
        sys.meta_path.insert(0, _ShmNotice(size))


def shm_warning(size: int) -> str:
    """The one line a container with too small a /dev/shm prints."""
    return (
        f"imagekit: WARNING: /dev/shm is {size >> 20} MiB (under 1 GiB): DataLoader workers "
        "and NCCL fail on it. Start the container with --shm-size 2g (or --ipc=host); "
        f"{SHM_SWITCH}=0 silences this line."
    )


class _ShmNotice:
    """A meta-path finder that waits for `import torch` (what DataLoader workers and NCCL
    come with), prints the /dev/shm warning, and steps aside."""

    def __init__(self, size: int) -> None:
        self.size = size

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name == "torch":
            sys.meta_path.remove(self)
            print(shm_warning(self.size), file=sys.stderr, flush=True)
        return None


class _TorchCompileNotice:
    """A meta-path finder that waits for `import torch`, then wraps `torch.compile` so that
    its first call with the inductor backend prints COMPILE_NOTICE. It steps aside after
    that one import, so no other import pays for it."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is not None and hasattr(loader, "exec_module"):
            run = loader.exec_module

            def exec_module(module: object) -> None:
                run(module)
                _wrap_compile(module)

            loader.exec_module = exec_module
        return spec


def _wrap_compile(torch: object) -> None:
    import functools

    original = getattr(torch, "compile", None)
    if original is None:
        return
    told = []

    @functools.wraps(original)
    def compile(*args: object, **kwargs: object) -> object:
        if not told and kwargs.get("backend", "inductor") == "inductor":
            told.append(True)
            print(COMPILE_NOTICE, file=sys.stderr, flush=True)
        return original(*args, **kwargs)

    torch.compile = compile
