"""The one owner of imagekit's `io.imagekit.*` labels: their names, how an image's labels are
written from its plan, and how they are read back. Pure.

Labels are how an image describes itself to everyone who meets it later (verify, the gate,
`doctor`, schedulers, people running `docker inspect`), so each name is spelled once, here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from imagekit.kernel.vocabulary import Flavour

PREFIX = "io.imagekit."

# What an image says about its contents (written by render, read by verify, gate and doctor).
SCHEMA = PREFIX + "schema"  # the version of this label set: "1"
CELL = PREFIX + "cell"  # the matrix cell the image was built for (e.g. 2.13.0-cpu)
TORCH = PREFIX + "torch"  # the PyTorch version it carries
VARIANT = PREFIX + "variant"  # the wheel variant: cpu, or the CUDA build (cu130)
PYTHON = PREFIX + "python"  # the Python version of its /opt/venv
OS = PREFIX + "os"  # the base operating system release
FLAVOUR = PREFIX + "flavour"  # slim (runtime only) or full (the workstation)
USER = PREFIX + "user"  # the non-root account its workload runs as
GLIBC_FLOOR = PREFIX + "glibc-floor"  # the oldest glibc its wheels need
CUDA = PREFIX + "cuda"  # CUDA images only: the CUDA version
CUDNN = PREFIX + "cudnn"  # CUDA images only: the cuDNN version
NCCL = PREFIX + "nccl"  # CUDA images only: the NCCL version
MIN_DRIVER = PREFIX + "min-driver"  # CUDA images only: the oldest NVIDIA driver it runs on
CUDA_ARCHS = PREFIX + "cuda-archs"  # CUDA images only: the GPU architectures (sm_90 ...)
RDMA = PREFIX + "rdma"  # "yes": the image carries the user-space RDMA stack
# "yes": torch.compile's default backend (inductor) works in the image; "no": the image carries
# no C++ compiler for it (slim with `compile: false`), and says so at the first torch.compile.
TORCH_COMPILE = PREFIX + "torch-compile"
# The Docker platform the image was built for (linux/arm64), readable before it is pulled.
PLATFORM = PREFIX + "platform"
# The probes the matrix requires of the image, space separated: `verify IMAGE` without the
# matrix counts these (not every probe that ran), so its verdict is the gate's.
REQUIRED_PROBES = PREFIX + "required-probes"

# What imagekit marks its own things with, so that it (and `gc`) can find them again.
INPUT_HASH = PREFIX + "input-hash"  # the build's inputs: equal hash, up to date
SOURCE_DATE_EPOCH = PREFIX + "source-date-epoch"  # the epoch its build stamped (times, bytecode)
MANAGED = PREFIX + "managed"  # an image imagekit built
STAGE = PREFIX + "stage"  # a builder stage (the classic builder's layer cache)
RUN_ID = PREFIX + "run-id"  # a container of one imagekit run
IMAGE = PREFIX + "image"  # the record name a probe container works for
SERVICE = PREFIX + "service"  # the service an `imagekit run` container serves
NODE = PREFIX + "node"  # which node of a multi-node probe a container is
OWNER = PREFIX + "owner"  # the imagekit process that made a container: host/pid/start ticks

# A base image made by `imagekit base bootstrap`.
BASE_SUITE = PREFIX + "base.suite"  # the Debian suite it was bootstrapped from
BASE_INCLUDE = PREFIX + "base.include"  # the extra packages it holds (its cache key)
BASE_VARIANT = PREFIX + "base.variant"  # mmdebstrap's variant (apt, minbase ...)
BASE_DOCS = PREFIX + "base.docs"  # whether documentation was kept
BASE_SECURITY = PREFIX + "base.security"  # the security suite it took fixes from, or none
BASE_MADE = PREFIX + "base.made"  # when its root filesystem was made (a reused one: then)
# The indexes it was made from: `URL sha256:HEX` of each suite's InRelease, ", " between them.
BASE_INDEXES = PREFIX + "base.indexes"


@dataclass(frozen=True)
class ImageLabels:
    """The `io.imagekit.*` labels of one image: `parse` reads them, `to_labels` writes them.
    Empty strings where a label is absent."""

    torch: str = ""
    python: str = ""
    flavour: Flavour | None = None  # None: absent, or no flavour imagekit knows
    cell: str = ""
    variant: str = ""
    os: str = ""
    user: str = ""
    glibc_floor: str = ""
    cuda: str | None = None
    cudnn: str = ""
    nccl: str = ""
    min_driver: str = ""
    archs: tuple[str, ...] = ()
    input_hash: str = ""
    rdma: bool = False
    # None: an image from before the label (nothing promised either way).
    torch_compile: bool | None = None
    platform: str = ""  # "" on an image from before the label
    required_probes: tuple[str, ...] = ()  # () on an image from before the label
    # The packages its base was bootstrapped with (inherited from `imagekit base bootstrap`'s
    # image); () on another base.
    base_packages: tuple[str, ...] = ()

    @classmethod
    def parse(cls, labels: Mapping[str, str]) -> ImageLabels:
        """Read the labels an engine or registry reports for an image."""
        get = labels.get
        return cls(
            torch=get(TORCH, ""),
            python=get(PYTHON, ""),
            flavour=next((f for f in Flavour if f == get(FLAVOUR)), None),
            cell=get(CELL, ""),
            variant=get(VARIANT, ""),
            os=get(OS, ""),
            user=get(USER, ""),
            glibc_floor=get(GLIBC_FLOOR, ""),
            cuda=get(CUDA) or None,
            cudnn=get(CUDNN, ""),
            nccl=get(NCCL, ""),
            min_driver=get(MIN_DRIVER, ""),
            archs=tuple(get(CUDA_ARCHS, "").split()),
            input_hash=get(INPUT_HASH, ""),
            rdma=get(RDMA) == "yes",
            torch_compile={"yes": True, "no": False}.get(get(TORCH_COMPILE, "")),
            platform=get(PLATFORM, ""),
            required_probes=tuple(get(REQUIRED_PROBES, "").split()),
            base_packages=tuple(p for p in get(BASE_INCLUDE, "").split(",") if p),
        )

    def to_labels(self) -> dict[str, str]:
        """The labels that say this of an image, `parse`'s inverse (`SCHEMA` besides): the CUDA
        ones only on a CUDA image, the later ones and those imagekit writes elsewhere (the
        input hash, a bootstrapped base's packages) only where set.

        None names the repository the image is tagged in: the same inputs make the same image
        whichever repository it is for, so a build for a second repository (and a full built
        on its slim) is the build cache's, and a digest means the same bytes everywhere."""
        labels = {SCHEMA: "1", CELL: self.cell, TORCH: self.torch, VARIANT: self.variant}
        labels |= {PYTHON: self.python, OS: self.os, FLAVOUR: self.flavour or "", USER: self.user}
        labels[GLIBC_FLOOR] = self.glibc_floor
        if self.cuda is not None:
            labels |= {CUDA: self.cuda, CUDNN: self.cudnn, NCCL: self.nccl}
            labels |= {MIN_DRIVER: self.min_driver, CUDA_ARCHS: " ".join(self.archs)}
        optional = {
            TORCH_COMPILE: {True: "yes", False: "no", None: ""}[self.torch_compile],
            PLATFORM: self.platform,
            REQUIRED_PROBES: " ".join(self.required_probes),
            RDMA: "yes" if self.rdma else "",
            INPUT_HASH: self.input_hash,
            BASE_INCLUDE: ",".join(self.base_packages),
        }
        return labels | {name: value for name, value in optional.items() if value}

    @property
    def is_imagekit(self) -> bool:
        """Whether these are the labels of an image imagekit built (it always labels torch)."""
        return bool(self.torch)

    @property
    def cudnn_major(self) -> str | None:
        """cuDNN's major version, the part a tag names."""
        return self.cudnn.split(".")[0] if self.cudnn else None


def workload_user(configured: str, labels: Mapping[str, str]) -> str:
    """The user an image's workload runs as, for containers that bypass its entrypoint.

    Its configured USER, unless that is root and the image names its user in the `user`
    label: a full image starts as root only so that its entrypoint can become the owner of
    /workspace, and probes and checks must run as the user its services run as.
    """
    if configured.split(":")[0] in ("", "0", "root") and labels.get(USER):
        return labels[USER]
    return configured


def base_indexes(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The (InRelease URL, sha256) pairs a base's `BASE_INDEXES` label names (images built on
    it inherit the label); () where it has none."""
    pairs = (item.rsplit(" ", 1) for item in labels.get(BASE_INDEXES, "").split(", ") if item)
    return tuple((url, digest.removeprefix("sha256:")) for url, digest in pairs)
