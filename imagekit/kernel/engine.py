"""The engine port: an image, an engine and its facts as the local engine describes them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypedDict

from imagekit.kernel.labels import ImageLabels
from imagekit.kernel.vocabulary import EngineName, GpuMechanism, ImageIdKind, ImageStore


@dataclass(frozen=True)
class LocalImage:
    """An image as the local engine describes it (`docker image inspect`)."""

    id: str
    tags: tuple[str, ...]
    labels: Mapping[str, str]
    size_bytes: int
    layers: tuple[str, ...]
    created: str
    env: Mapping[str, str] = field(default_factory=dict)
    platform: str = ""  # linux/amd64 (os/architecture[/variant]); "" when the engine is silent

    @property
    def imagekit(self) -> ImageLabels:
        """Its `io.imagekit.*` labels, parsed."""
        return ImageLabels.parse(self.labels)


@dataclass(frozen=True)
class Layer:
    """One layer of an image's history: the instruction that made it and its size."""

    created_by: str
    size_bytes: int


class EngineJson(TypedDict):
    """An engine as run.json and `doctor --json` record it."""

    name: EngineName
    server_version: str | None
    api_version: str | None
    endpoint: str
    os: str | None
    architecture: str | None
    rootless: bool
    image_store: ImageStore
    image_id_kind: ImageIdKind
    storage_driver: str | None
    cgroup_version: str | None
    runtimes: list[str]
    cdi_devices: list[str]
    gpu_mechanism: GpuMechanism
    cpus: int | None
    memory_bytes: int | None


# The first Docker API with BuildKit (Docker 18.09).
BUILDKIT_API = (1, 39)


@dataclass(frozen=True)
class EngineInfo:
    """Who the engine is, for run.json and for the decisions that depend on it."""

    server_version: str | None = None
    api_version: str | None = None
    os: str | None = None
    storage_driver: str | None = None
    cgroup_version: str | None = None
    runtimes: tuple[str, ...] = ()
    cpus: int | None = None
    memory_bytes: int | None = None
    name: EngineName = EngineName.DOCKER
    image_store: ImageStore = ImageStore.CLASSIC
    # CDI device names the engine can inject (nvidia.com/gpu=all, ...); () when none are known.
    cdi_devices: tuple[str, ...] = ()
    # Where the engine is: unix:///var/run/docker.sock, tcp://host:2375, ssh://user@host.
    endpoint: str = ""
    architecture: str | None = None  # the engine host's: x86_64, aarch64
    # Run by a user, not root (rootless Podman or Docker): on cgroup v1 such an engine applies
    # no memory or process limits, and its containers' root is that user.
    rootless: bool = False

    @property
    def gpu_mechanism(self) -> GpuMechanism:
        """How a container gets the GPUs: the NVIDIA runtime where the engine has it, else
        CDI where the host has NVIDIA's CDI devices."""
        cdi = GpuMechanism.CDI if self._cdi else GpuMechanism.NONE
        if self.name == EngineName.PODMAN:
            # Podman's Docker API drops every device request without a word before 5.4
            # (containers/podman#25171); from 5.4 it passes CDI requests.
            return cdi if self._podman_passes_cdi else GpuMechanism.NONE
        if any("nvidia" in r for r in self.runtimes):
            return GpuMechanism.NVIDIA_RUNTIME
        return cdi

    @property
    def _cdi(self) -> bool:
        return any(d.startswith("nvidia.com/gpu=") for d in self.cdi_devices)

    @property
    def _podman_passes_cdi(self) -> bool:
        parts = [int(p) if p.isdigit() else 0 for p in (self.server_version or "0").split(".")[:2]]
        return tuple(parts + [0] * (2 - len(parts))) >= (5, 4)

    @property
    def gpu_note(self) -> str:
        """Why an engine with GPU devices on its host still hands none over; "" otherwise."""
        if self.name == EngineName.PODMAN and self._cdi and not self._podman_passes_cdi:
            return (
                f"the host has CDI devices, but Podman {self.server_version}'s Docker API drops "
                "device requests (Podman 5.4+ passes them)"
            )
        return ""

    @property
    def gpu_runtime(self) -> bool:
        """Whether containers of this engine can be given the GPUs, by either mechanism."""
        return self.gpu_mechanism != GpuMechanism.NONE

    @property
    def image_id_kind(self) -> ImageIdKind:
        """What this engine's image ids are digests of (containerd's: what a push uploads)."""
        if self.image_store == ImageStore.CONTAINERD:
            return ImageIdKind.MANIFEST
        return ImageIdKind.CONFIG

    @property
    def remote(self) -> bool:
        """Whether the engine is reached over the network (its files are not ours)."""
        return self.endpoint.startswith(("tcp://", "ssh://", "http://", "https://"))

    @property
    def has_buildkit(self) -> bool:
        """Whether `docker buildx` can build on this engine: Docker from API 1.39 (18.09, the
        first with BuildKit; an engine that does not say is taken to have it). Podman's API
        has no BuildKit."""
        if self.name != EngineName.DOCKER:
            return False
        parts = (self.api_version or "").split(".")[:2]
        return (
            len(parts) < 2
            or not all(p.isdigit() for p in parts)
            or ((int(parts[0]), int(parts[1])) >= BUILDKIT_API)
        )

    @property
    def title(self) -> str:
        """Which engine, in two or three words: `Docker 26.1.5`, `rootless Podman 4.3.1`."""
        engine = "Podman" if self.name == EngineName.PODMAN else "Docker"
        return f"{'rootless ' if self.rootless else ''}{engine} {self.server_version or '?'}"

    def describe(self) -> str:
        """One line: `Docker 26.1.5 at unix://..., containerd image store, GPUs: none`."""
        store = {
            ImageStore.CONTAINERD: "containerd image store",
            ImageStore.CLASSIC: f"classic image store ({self.storage_driver or '?'})",
            ImageStore.PODMAN: f"containers/storage ({self.storage_driver or '?'})",
        }.get(self.image_store, self.image_store)
        gpus: str = self.gpu_mechanism
        if self.gpu_mechanism == GpuMechanism.CDI:
            gpus = "CDI " + ", ".join(d for d in self.cdi_devices if d.startswith("nvidia.com/"))
        elif self.gpu_note:
            gpus = f"none ({self.gpu_note})"
        where = f" at {self.endpoint}" if self.endpoint else ""
        return f"{self.title}{where}, {store}, GPUs: {gpus}"

    def to_json(self) -> EngineJson:
        """As run.json records it."""
        return {
            "name": self.name,
            "server_version": self.server_version,
            "api_version": self.api_version,
            "endpoint": self.endpoint,
            "os": self.os,
            "architecture": self.architecture,
            "rootless": self.rootless,
            "image_store": self.image_store,
            "image_id_kind": self.image_id_kind,
            "storage_driver": self.storage_driver,
            "cgroup_version": self.cgroup_version,
            "runtimes": list(self.runtimes),
            "cdi_devices": list(self.cdi_devices),
            "gpu_mechanism": self.gpu_mechanism,
            "cpus": self.cpus,
            "memory_bytes": self.memory_bytes,
        }


class Engine(Protocol):
    """The image store and runtime of a container engine."""

    def info(self) -> EngineInfo:
        """Versions, storage, runtimes."""
        ...

    def inspect_image(self, reference: str) -> LocalImage | None:
        """The image `reference` names (a name:tag or an id); None when there is none."""
        ...

    def history(self, image_id: str) -> list[Layer]:
        """The image's layers, newest first."""
        ...

    def pull(self, reference: str, platform: str | None = None) -> str:
        """Pull `reference` (for `platform`: None, the engine's); "" when it worked, else the
        engine's reason."""
        ...

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        """Give `image_id` the name `repository:tag`."""
        ...

    def output_of(self, image_id: str, argv: list[str]) -> str:
        """What `argv` prints in a throw-away container of the image (no network, removed)."""
        ...
