"""Cells, image plans and the tags they get. Pure values, no I/O.

A *cell* is one (torch, CUDA-or-CPU, Python, OS) combination with every derived
fact filled in; an *image plan* is a cell in one flavour (slim or full).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from imagekit.kernel.reference import has_registry_host
from imagekit.kernel.vocabulary import Flavour, Platform
from imagekit.matrix.compat import variant_tag

# Docker's grammar (distribution/reference): tags are at most 128 characters.
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = (
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9-]+)*(?::[0-9]+)?"
    r"|\[[0-9a-fA-F:]+\](?::[0-9]+)?)"
)
REPOSITORY_RE = re.compile(rf"^(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*$")
IMAGE_REF_RE = re.compile(
    rf"^(?P<name>(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)
FLAVOURS = tuple(Flavour)


def tag_problem(tag: str) -> str | None:
    """None when `tag` is a valid imagekit tag; else what is wrong with it."""
    if len(tag) > 128:
        return f"tag {tag!r} is {len(tag)} characters long; Docker allows at most 128"
    if not TAG_RE.match(tag):
        bad = sorted({c for c in tag if not re.match(r"[A-Za-z0-9_.-]", c)})
        what = f"characters {' '.join(repr(c) for c in bad)}" if bad else "its first character"
        return f"tag {tag!r} is not a valid Docker tag ({what} not allowed)"
    if tag != tag.lower():
        # Docker accepts it, but tooling that folds case makes `X-CPU` and `x-cpu` collide.
        return f"tag {tag!r} has uppercase letters; imagekit keeps tags lowercase"
    return None


def repository_problem(repository: str) -> str | None:
    """None when `repository` is a valid Docker repository name; else why not."""
    if REPOSITORY_RE.match(repository):
        return None
    if repository != repository.lower():
        return f"repository {repository!r} must be lowercase"
    return f"repository {repository!r} is not a valid Docker repository name"


def platform_arch(platform: str) -> str:
    """ "arm64" for linux/arm64: the architecture part of a Docker platform."""
    return platform.split("/")[1]


def platform_suffix(platform: str) -> str:
    """What a cell id and a local tag get for `platform`: nothing for linux/amd64 (the
    default, so single-platform matrices keep their names), `-arm64` for linux/arm64."""
    return "" if platform == Platform.AMD64 else f"-{platform_arch(platform)}"


def retarget(repository: str, registry: str | None) -> str:
    """`repository` on another registry: ghcr.io/team/pytorch -> REGISTRY/team/pytorch."""
    if not registry:
        return repository
    first, _, rest = repository.partition("/")
    return f"{registry.rstrip('/')}/{rest if has_registry_host(first) and rest else repository}"


def nvidia_require_cuda(cuda: str) -> str:
    """NVIDIA_REQUIRE_CUDA of an image built for `cuda`: the container toolkit refuses to
    start it on a driver that cannot run that CUDA."""
    return f"cuda>={cuda}"


@dataclass(frozen=True)
class Cell:
    """One buildable combination, with everything the compatibility data derives."""

    id: str
    torch: str
    cuda: str | None
    python: str
    os: str
    base_image: str
    cudnn: str | None
    nccl: str | None
    min_driver: str | None
    archs: tuple[str, ...]
    index_url: str
    glibc_floor: str
    compiler_packages: tuple[str, ...]
    cuda_home: str | None
    experimental: bool
    flavours: tuple[Flavour, ...]
    # The Docker platform this cell is built for; its id carries `platform_suffix`.
    platform: Platform = Platform.AMD64
    end_of_patch: str | None = None  # YYYY-MM-DD: its release's last day of patches

    @property
    def shared_id(self) -> str:
        """The id without the platform suffix: the same for every platform of one image."""
        return self.id.removesuffix(platform_suffix(self.platform))

    @property
    def variant(self) -> str:
        """`cu128` or `cpu`."""
        return variant_tag(self.cuda)

    @property
    def nvidia_require_cuda(self) -> str | None:
        """The image's NVIDIA_REQUIRE_CUDA (None for a CPU cell)."""
        return nvidia_require_cuda(self.cuda) if self.cuda else None

    @property
    def torch_minor(self) -> str:
        """ "2.8" for torch 2.8.0."""
        return ".".join(self.torch.split(".")[:2])

    @property
    def cudnn_major(self) -> str | None:
        """ "9" for cuDNN 9.10.2.21."""
        return self.cudnn.split(".")[0] if self.cudnn else None

    def versioned_tag(self, flavour: Flavour, prefix: str = "") -> str:
        """The immutable tag of this cell in `flavour` (README.md, Publishing)."""
        if self.cuda is None:
            return f"{prefix}{self.torch}-cpu-py{self.python}-{flavour}"
        return (
            f"{prefix}{self.torch}-cuda{self.cuda}-cudnn{self.cudnn_major}"
            f"-py{self.python}-{flavour}"
        )

    def alias_tag(self, flavour: Flavour, prefix: str = "") -> str:
        """The floating `{torch major.minor}-cuda{cuda}-{flavour}` alias."""
        kind = "cpu" if self.cuda is None else f"cuda{self.cuda}"
        return f"{prefix}{self.torch_minor}-{kind}-{flavour}"


@dataclass(frozen=True)
class ImagePlan:
    """One image to build: a cell in a flavour, with its tags and budget."""

    cell: Cell
    flavour: Flavour
    repository: str
    tag: str
    aliases: tuple[str, ...]
    size_budget_bytes: int
    packages: tuple[str, ...]
    required_probes: tuple[str, ...]
    user_name: str
    uid: int
    gid: int
    source: str | None = None
    leave_out: tuple[str, ...] = ()
    nodes: int = 1  # >1: verify runs the multi-node probe across this many containers
    rdma: bool = False  # carries the user-space RDMA stack (InfiniBand/RoCE for NCCL)
    compile: bool = True  # torch.compile (inductor) works: a C++ compiler and headers inside

    @property
    def name(self) -> str:
        """Folder and selection name: `<cell id>-<flavour>`."""
        return f"{self.cell.id}-{self.flavour}"

    @property
    def platform(self) -> Platform:
        """The Docker platform of this image (`linux/amd64`)."""
        return self.cell.platform

    @property
    def local_tag(self) -> str:
        """The tag of this platform's image on the engine: the versioned tag, plus
        `-arm64` for linux/arm64. On a registry the versioned tag names an index of
        every platform's image (`publish`)."""
        return self.tag + platform_suffix(self.platform)

    @property
    def reference(self) -> str:
        """`repository:local_tag`: the image on the engine."""
        return f"{self.repository}:{self.local_tag}"

    @property
    def slim_reference(self) -> str:
        """The slim image of the same cell and platform (what `full` is built FROM)."""
        slim = self.tag.removesuffix(self.flavour) + Flavour.SLIM
        return f"{self.repository}:{slim}{platform_suffix(self.platform)}"


def matches(selectors: list[str], plan: ImagePlan) -> bool:
    """Whether `plan` is picked by any of `selectors` (empty: all).

    A selector matches a plan whose name, cell id or tag equals it, or starts
    with it followed by `-` (so `2.8.0` picks every 2.8.0 image).
    """
    if not selectors:
        return True
    names = (plan.name, plan.cell.id, plan.tag)
    return any(n == s or n.startswith(s + "-") for s in selectors for n in names)
