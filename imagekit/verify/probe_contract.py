"""The contract between the host and the probe runner (`probes/_runner.py`). Pure.

The runner takes `--device auto|cpu|cuda` and `--expected JSON`; the probes read that JSON with
`expected.get(key)`. Here both are typed, once: `ProbeDevice` is the device's closed set, and
`ProbeExpectations` is what the host expects of the image (versions from its labels) and how
the probes must run there (settings). `to_json` writes exactly the keys the probes read, and
only those that are set, so a probe's `if want("rdma")` sees what it always saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypedDict

from imagekit.kernel.labels import ImageLabels
from imagekit.kernel.runtime import MIN_SHM_BYTES


class ProbeDevice(StrEnum):
    """Where the probes compute: the runner's `--device`."""

    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"


@dataclass(frozen=True)
class ImageVersions:
    """What the image's labels say it carries; the probes compare it with what runs inside.

    `torch` None: the labels name no torch, and neither torch nor CUDA is compared (a CPU
    image's `cuda` is None and is compared: it must report no CUDA).
    """

    torch: str | None = None
    cuda: str | None = None
    python: str | None = None
    cudnn: str | None = None
    nccl: str | None = None
    archs: tuple[str, ...] = ()
    glibc_floor: str | None = None
    rdma: bool = False
    torch_compile: bool | None = None  # None: the labels do not say

    @classmethod
    def from_labels(cls, labels: ImageLabels) -> ImageVersions:
        """The versions an image's own labels claim."""
        return cls(
            torch=labels.torch or None,
            cuda=labels.cuda,
            python=labels.python or None,
            cudnn=labels.cudnn or None,
            nccl=labels.nccl or None,
            archs=tuple(labels.archs),
            glibc_floor=labels.glibc_floor or None,
            rdma=labels.rdma,
            torch_compile=labels.torch_compile,
        )


@dataclass(frozen=True)
class ProbeSettings:
    """How the probes run: what the container must give them, and how their limits stretch."""

    require_non_root: bool = False
    min_shm_bytes: int | None = None
    time_scale: float = 1.0  # >1: an emulated image; a probe's own time limits stretch by it
    # The ddp probe's rendezvous limit (default: its own, stretched by `time_scale`).
    ddp_init_timeout_s: float | None = None

    @classmethod
    def container(cls, time_scale: float = 1.0) -> ProbeSettings:
        """A container run: not as root, with /dev/shm big enough for NCCL."""
        return cls(require_non_root=True, min_shm_bytes=MIN_SHM_BYTES, time_scale=time_scale)


class ExpectedJson(TypedDict, total=False):
    """The runner's `--expected`, as the probes read it: each key only when it is set."""

    torch: str
    cuda: str | None  # with torch, always: a CPU image's is null
    python: str
    cudnn: str
    nccl: str
    archs: list[str]
    glibc_floor: str
    rdma: bool
    torch_compile: bool
    require_non_root: bool
    min_shm_bytes: int
    ddp_init_timeout_s: float
    time_scale: float


@dataclass(frozen=True)
class ProbeExpectations:
    """The runner's `--expected`: the image's versions and the run's settings."""

    versions: ImageVersions = ImageVersions()
    settings: ProbeSettings = ProbeSettings()

    @classmethod
    def of_image(
        cls, labels: ImageLabels, *, container: bool = True, time_scale: float = 1.0
    ) -> ProbeExpectations:
        """What the probes expect of an image, from its labels (`container`: it runs in one)."""
        settings = (
            ProbeSettings.container(time_scale)
            if container
            else ProbeSettings(time_scale=time_scale)
        )
        return cls(ImageVersions.from_labels(labels), settings)

    def to_json(self) -> ExpectedJson:
        """The JSON the probes read (`probes/_runner.py --expected`): only the keys that are set."""
        v, s = self.versions, self.settings
        found: ExpectedJson = {}
        if v.torch:
            # A CPU image must report no CUDA: its `cuda` goes as null, never left out.
            found |= {"torch": v.torch, "cuda": v.cuda}
        if v.python:
            found["python"] = v.python
        if v.cudnn:
            found["cudnn"] = v.cudnn
        if v.nccl:
            found["nccl"] = v.nccl
        if v.archs:
            found["archs"] = list(v.archs)
        if v.glibc_floor:
            found["glibc_floor"] = v.glibc_floor
        if v.rdma:
            found["rdma"] = v.rdma
        if s.require_non_root:
            found["require_non_root"] = s.require_non_root
        if s.min_shm_bytes:
            found["min_shm_bytes"] = s.min_shm_bytes
        if s.ddp_init_timeout_s:
            found["ddp_init_timeout_s"] = s.ddp_init_timeout_s
        if v.torch_compile is not None:
            found["torch_compile"] = v.torch_compile
        if s.time_scale != 1:
            found["time_scale"] = s.time_scale
        return found
