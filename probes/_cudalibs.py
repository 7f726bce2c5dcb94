"""cuDNN and NCCL, shared by the env and cuda_stack probes: what versions are loaded, and checks.

Reads the versions the loaded libraries report (through torch, which the caller passes in) and
the versions of their wheels (nvidia-cudnn-cu13, nvidia-nccl-cu13, ...), and checks them
against what the image's labels promise. Not a probe (its name starts with `_`). Standard
library only: this file runs inside images that do not contain imagekit.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any

from _probekit import Recorder

# The libraries checked, by the key their label value comes under in `expected`.
LIBRARIES = ("cudnn", "nccl")


def verbs() -> str:
    """Whether libibverbs (the user-space RDMA stack NCCL uses for InfiniBand/RoCE) loads:
    "loads", or "absent (why)"."""
    import ctypes

    try:
        ctypes.CDLL("libibverbs.so.1")
    except OSError as exc:
        return f"absent ({exc})"
    return "loads"


def version_text(parts: Any) -> str:
    """(2, 30, 7) -> "2.30.7"."""
    return ".".join(str(p) for p in parts)


def cudnn_text(version: int | None) -> str | None:
    """cuDNN 9 reports 92400 for 9.24.0; turn it into "9.24.0"."""
    if not version:
        return None
    major, rest = divmod(version, 10000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def label_version(value: Any) -> str:
    """The part of a label's version a library reports: "9.24.0.43" (a wheel's) -> "9.24.0"."""
    return ".".join(str(value).split(".")[:3])


def cudnn_version(torch: Any) -> str | None:
    """The version the loaded cuDNN reports, e.g. "9.24.0"; None without cuDNN."""
    if not torch.backends.cudnn.is_available():
        return None
    return cudnn_text(torch.backends.cudnn.version())


def cudnn_compiled_version(torch: Any) -> str | None:
    """The cuDNN version torch was compiled against, e.g. "9.24.0"; None if unknown."""
    try:
        return version_text(torch._C._cudnn.getCompileVersion())  # (major, minor, patch)
    except (AttributeError, RuntimeError):
        return None


def nccl_version(torch: Any) -> str | None:
    """The version the loaded NCCL reports, e.g. "2.30.7"; None on a CPU build of torch."""
    if torch.version.cuda is None:
        return None
    try:
        return version_text(torch.cuda.nccl.version())
    except (AttributeError, RuntimeError):
        return None


def library_versions(torch: Any) -> dict[str, str | None]:
    """What each loaded library reports, by its key in LIBRARIES."""
    return {"cudnn": cudnn_version(torch), "nccl": nccl_version(torch)}


def wheel_version(key: str) -> tuple[str, str] | None:
    """(name, version) of the installed `nvidia-{key}` wheel (`nvidia-{key}-cu13` and such)."""
    prefix = f"nvidia-{key}"
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name == prefix or name.startswith(prefix + "-cu"):
            return name, dist.version
    return None


def check_libraries(rec: Recorder, seen: dict[str, str | None], want: Callable[[str], Any]) -> None:
    """Each loaded library reports the version its label promises (when there is a label)."""
    for key in LIBRARIES:
        if want(key):
            # The library reports major.minor.patch; the label carries the wheel's version.
            expect = label_version(want(key))
            rec.equal(f"{key} library reports its wheel's version", seen[key], expect)


def check_wheels(
    rec: Recorder, wheels: dict[str, tuple[str, str] | None], want: Callable[[str], Any]
) -> None:
    """Each installed wheel has the version its label promises (when there is a label)."""
    for key in LIBRARIES:
        if want(key):
            wheel = wheels[key]
            rec.equal(f"{key} wheel version", wheel[1] if wheel else None, want(key))


def check_cudnn_compiled(rec: Recorder, runtime: str | None, compiled: str | None) -> None:
    """The loaded cuDNN is the major.minor torch was compiled against (when both are known).

    A second cuDNN earlier on the library path shows up here as a different version.
    """
    if runtime and compiled:
        rec.check(
            "cuDNN runtime == compile version",
            compiled.split(".")[:2] == runtime.split(".")[:2],
            f"runtime {runtime}, compiled against {compiled}",
        )
