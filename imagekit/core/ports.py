"""The ports: what orchestration needs from the world, as small Protocols and plain values. Pure.

The adapters (`imagekit/adapters/`) implement them over Docker, registries, subprocesses and
the results folder; `tests/fakes.py` implements them in memory, so `BuildRun`, `VerifyRun` and
the publishers (`publish_images`) are tested without an engine. Each port is as small as its
callers need.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypedDict

from imagekit.core.build_stream import BuildLog
from imagekit.core.labels import ImageLabels
from imagekit.core.probe_contract import ProbeDevice, ProbeExpectations
from imagekit.core.probe_nodes import NodeOutput
from imagekit.core.probes import RunnerOutput, parse_events
from imagekit.core.records import Check, ImageRecord, PublishRecord
from imagekit.core.simple_index import IndexFile

# The engine ---------------------------------------------------------------------------------


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

    @classmethod
    def from_inspect(cls, attrs: Mapping[str, Any]) -> LocalImage:
        """From `docker image inspect` output."""
        config = attrs.get("Config") or {}
        parts = [attrs.get("Os") or "", attrs.get("Architecture") or "", attrs.get("Variant")]
        return cls(
            id=attrs["Id"],
            tags=tuple(attrs.get("RepoTags") or ()),
            labels=dict(config.get("Labels") or {}),
            size_bytes=int(attrs.get("Size") or 0),
            layers=tuple((attrs.get("RootFS") or {}).get("Layers") or ()),
            created=str(attrs.get("Created", "")),
            env=dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e),
            platform="/".join(p for p in parts if p) if parts[0] and parts[1] else "",
        )

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

    name: str
    server_version: str | None
    api_version: str | None
    endpoint: str
    os: str | None
    architecture: str | None
    rootless: bool
    image_store: str
    image_id_kind: str
    storage_driver: str | None
    cgroup_version: str | None
    runtimes: list[str]
    cdi_devices: list[str]
    gpu_mechanism: str
    cpus: int | None
    memory_bytes: int | None


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
    # docker | podman: Podman serves the Docker API, with differences imagekit works around.
    name: str = "docker"
    # classic (graph driver: image id = config digest) | containerd (the containerd image
    # store: image id = manifest or index digest) | podman (containers/storage: config digest).
    image_store: str = "classic"
    # CDI device names the engine can inject (nvidia.com/gpu=all, ...); () when none are known.
    cdi_devices: tuple[str, ...] = ()
    # Where the engine is: unix:///var/run/docker.sock, tcp://host:2375, ssh://user@host.
    endpoint: str = ""
    architecture: str | None = None  # the engine host's: x86_64, aarch64
    # Run by a user, not root (rootless Podman or Docker): on cgroup v1 such an engine applies
    # no memory or process limits, and its containers' root is that user.
    rootless: bool = False

    @property
    def gpu_mechanism(self) -> str:
        """How a container gets the GPUs: `nvidia-runtime` (the NVIDIA container toolkit's
        runtime, `--gpus all`), `cdi` (CDI devices `nvidia.com/gpu=all`, as Podman and newer
        Docker use them) or `none`."""
        if self.name == "podman":
            # Podman's Docker API drops every device request without a word before 5.4
            # (containers/podman#25171); from 5.4 it passes CDI requests.
            return "cdi" if self._cdi and self._podman_passes_cdi else "none"
        if any("nvidia" in r for r in self.runtimes):
            return "nvidia-runtime"
        return "cdi" if self._cdi else "none"

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
        if self.name == "podman" and self._cdi and not self._podman_passes_cdi:
            return (
                f"the host has CDI devices, but Podman {self.server_version}'s Docker API drops "
                "device requests (Podman 5.4+ passes them)"
            )
        return ""

    @property
    def gpu_runtime(self) -> bool:
        """Whether containers of this engine can be given the GPUs, by either mechanism."""
        return self.gpu_mechanism != "none"

    @property
    def image_id_kind(self) -> str:
        """What this engine's image ids are digests of: `config` or `manifest` (a manifest
        or an index; the containerd store names an image by what a push uploads)."""
        return "manifest" if self.image_store == "containerd" else "config"

    @property
    def remote(self) -> bool:
        """Whether the engine is reached over the network (its files are not ours)."""
        return self.endpoint.startswith(("tcp://", "ssh://", "http://", "https://"))

    @property
    def has_buildkit(self) -> bool:
        """Whether `docker buildx` can build on this engine (Podman's API has no BuildKit)."""
        return self.name == "docker"

    def describe(self) -> str:
        """One line: `Docker 26.1.5 at unix://..., containerd image store, GPUs: none`."""
        store = {
            "containerd": "containerd image store",
            "classic": f"classic image store ({self.storage_driver or '?'})",
            "podman": f"containers/storage ({self.storage_driver or '?'})",
        }.get(self.image_store, self.image_store)
        engine = "Podman" if self.name == "podman" else "Docker"
        if self.rootless:
            engine = f"rootless {engine}"
        gpus = self.gpu_mechanism
        if gpus == "cdi":
            gpus = "CDI " + ", ".join(d for d in self.cdi_devices if d.startswith("nvidia.com/"))
        elif self.gpu_note:
            gpus = f"none ({self.gpu_note})"
        where = f" at {self.endpoint}" if self.endpoint else ""
        return f"{engine} {self.server_version or '?'}{where}, {store}, GPUs: {gpus}"

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


# Builders -----------------------------------------------------------------------------------

LineSink = Callable[[BuildLog, str], None]


@dataclass(frozen=True)
class BuildRequest:
    """One image to build from a written context folder."""

    name: str
    context_dir: Path
    reference: str
    build_args: dict[str, str]
    labels: dict[str, str]
    log_path: Path
    no_cache: bool = False
    ca_bundle: Path | None = None
    # BuildKit only: registry references to import the build cache from and export it to
    # (mode=max, so the builder stage's layers travel too), and the layers' compression.
    cache_from: str | None = None
    cache_to: str | None = None
    compression: str | None = None  # None: new layers gzip, reused ones as they are
    # The network the build's RUN steps get; "none" proves a build needs no network.
    network: str | None = None
    # The Docker platform to build for (linux/arm64 on x86_64 runs its RUN steps under qemu);
    # None: the engine's own.
    platform: str | None = None


@dataclass
class BuildOutcome:
    """How a build ended."""

    ok: bool
    image_id: str | None
    message: str = ""
    log: BuildLog = field(default_factory=BuildLog)


class Builder(Protocol):
    """Builds one image."""

    name: str

    def build(self, request: BuildRequest, on_line: LineSink) -> BuildOutcome:
        """Build `request`, calling `on_line` for every output line."""
        ...


# Probes -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeRequest:
    """One run of some probes in one image (or, in host mode, in this Python environment)."""

    image: str
    probes_dir: Path
    probes: tuple[str, ...]
    expected: ProbeExpectations
    device: ProbeDevice
    gpus: bool
    timeout_s: float
    shm_bytes: int
    labels: Mapping[str, str] = field(default_factory=dict)
    memory_bytes: int = 4 << 30  # what the probes need, shared memory and scratch not counted
    environment: Mapping[str, str] = field(default_factory=dict)  # for the container (QEMU_CPU)


@dataclass(frozen=True)
class ProbeRun:
    """What came back from one probe run: the results, the raw log and the timings.

    The same type from a container and from host mode.
    """

    output: RunnerOutput
    log: str
    exit_code: int | None
    timed_out: bool
    wall_s: float
    start_s: float = 0.0

    @classmethod
    def of(
        cls,
        request: ProbeRequest,
        stdout: str,
        stderr: str,
        *,
        exit_code: int | None,
        timed_out: bool,
        nonce: str,
        wall_s: float,
        start_s: float = 0.0,
    ) -> ProbeRun:
        """What the runner's output says about each asked probe (`parse_events`)."""
        output = parse_events(
            stdout,
            list(request.probes),
            timed_out=timed_out,
            exit_code=exit_code,
            stderr=stderr,
            nonce=nonce,
        )
        return cls(output, stdout + stderr, exit_code, timed_out, wall_s, start_s)


@dataclass(frozen=True)
class NodesRequest:
    """One multi-node probe across `nodes` nodes of `nproc` ranks each."""

    image: str
    probes_dir: Path
    probe: str
    nodes: int
    nproc: int
    device: str  # cpu | cuda
    gpus: bool
    timeout_s: float
    init_timeout_s: float
    # How long nodes that reported may run on once one has ended (adapters/node_wait.py).
    linger_s: float
    shm_bytes: int
    memory_bytes: int
    labels: Mapping[str, str] = field(default_factory=dict)
    environment: Mapping[str, str] = field(default_factory=dict)  # for every node (QEMU_CPU)


@dataclass(frozen=True)
class NodesRun:
    """What each node of a multi-node run printed, and the run's nonce to read it with."""

    outputs: tuple[NodeOutput, ...]
    nonce: str
    wall_s: float

    @property
    def log(self) -> str:
        """Every node's output, one after the other."""
        return "".join(
            f"--- node {o.node} (exit {o.exit_code}) ---\n{o.stdout}{o.stderr}"
            for o in self.outputs
        )


class ProbeRunner(Protocol):
    """Runs probes somewhere and always cleans up after itself."""

    def run(self, request: ProbeRequest) -> ProbeRun:
        """Run the request's probes; raises GpuUnavailableError when GPUs cannot be had."""
        ...

    def run_nodes(self, request: NodesRequest) -> NodesRun:
        """Run a multi-node probe: one node per container (or process), a rendezvous between
        them, and nothing left behind however it ends."""
        ...


class Inspector(Protocol):
    """Looks at an image from the outside: who runs, what is writable, what it carries."""

    def structure(
        self, image_id: str, labels: Mapping[str, str], labels_run: Mapping[str, str]
    ) -> list[Check]:
        """The structure checks of one image (its container carries `labels_run`)."""
        ...


# Registries ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RemoteManifest:
    """What a registry holds under a tag: the manifest (or index) digest and the config
    digest ("" for an index)."""

    digest: str
    config: str

    def holds(self, image_id: str) -> bool:
        """Whether this is the local image `image_id`, compared like with like: an engine
        whose ids are config digests (the classic store, Podman) matches the config; one whose
        ids are manifest or index digests (the containerd store, which pushes its manifest
        unchanged) matches the tag's digest. Each is a hash of the image's whole content."""
        return bool(image_id) and image_id in (self.digest, self.config)


@dataclass(frozen=True)
class ManifestDocument:
    """A manifest or an index as the registry holds it: its exact bytes and what they say.

    Promotion puts these same bytes under another tag, so the digest stays the same.
    """

    media_type: str
    body: bytes
    digest: str
    config: str = ""  # a manifest's config digest (the image id); "" for an index
    children: tuple[tuple[str, str], ...] = ()  # an index's (digest, platform) entries

    @property
    def is_index(self) -> bool:
        """Whether this is an index (a manifest list) rather than one image's manifest."""
        return bool(self.children) or "index" in self.media_type or "list" in self.media_type

    def images(self) -> tuple[tuple[str, str], ...]:
        """The image manifests of an index, attestation manifests (unknown/unknown) left out."""
        return tuple((d, p) for d, p in self.children if p != "unknown/unknown")


@dataclass(frozen=True)
class PushOutcome:
    """How pushing one tag ended."""

    ok: bool
    attempts: int
    error: str = ""
    kind: str = ""  # transient | permanent, for failures
    errors: tuple[str, ...] = ()


class Registry(Protocol):
    """The registry images are published to."""

    def manifest(self, reference: str) -> RemoteManifest | None:
        """What `reference` holds; None when the tag is absent; RegistryError when the
        registry cannot be asked."""
        ...

    def push(self, reference: str) -> PushOutcome:
        """Push the local `reference`, retrying what is transient."""
        ...

    def document(self, reference: str) -> ManifestDocument | None:
        """The manifest or index `reference` (a tag, or `repository@digest`) names, byte for
        byte; None when absent."""
        ...

    def put(self, reference: str, document: ManifestDocument) -> str:
        """Put `document` under the tag `reference` names, unchanged; the digest it has there."""
        ...


@dataclass(frozen=True)
class Package:
    """One installed package of an image: a Python distribution or an OS (dpkg) package."""

    name: str
    version: str
    arch: str = ""  # dpkg's architecture (amd64, all); "" for Python
    properties: tuple[tuple[str, str], ...] = ()  # e.g. the CUDA stack a torch wheel carries


@dataclass(frozen=True)
class Inventory:
    """What an image holds, for its SBOM: the image, its OS, its OS and Python packages."""

    reference: str
    digest: str
    image_id: str
    distro: str = ""  # `debian-12` (os-release ID-VERSION_ID)
    os_packages: tuple[Package, ...] = ()
    python_packages: tuple[Package, ...] = ()


class SbomMaker(Protocol):
    """Writes software bills of materials."""

    def image_sbom(self, inventory: Inventory) -> dict[str, Any]:
        """One CycloneDX document for the whole image: OS and Python packages together,
        checked against the CycloneDX schema."""
        ...


# Signing ------------------------------------------------------------------------------------


class Signer(Protocol):
    """Signs published digests and attaches attestations to them (cosign with a key file)."""

    def sign(self, reference: str) -> str:
        """Sign `repository@digest`; "" when it worked, else the reason."""
        ...

    def attest(self, reference: str, predicate_type: str, predicate: Mapping[str, Any]) -> str:
        """Attach a signed in-toto attestation of `predicate` to `repository@digest`; "" when
        it worked, else the reason."""
        ...


@dataclass(frozen=True)
class Attested:
    """What checking an image's signature and attestations against a public key found.

    `state`: `ok` (signed by the key; `predicates` holds the attested predicates of the type
    asked, every one verified against the key), `unsigned` (no signature at all), `other key`
    (signatures, none by this key), `no attestation` (signed, but no attestation of the type
    by this key), `error` (the registry or the tool failed: `reason` says how)."""

    state: str
    reason: str = ""
    digest: str = ""
    predicates: tuple[Mapping[str, Any], ...] = ()


class AttestationReader(Protocol):
    """Checks an image's signature and reads its attestations, verified against a key."""

    def attested(self, reference: str, predicate_type: str) -> Attested:
        """The signature of `reference` (tag or digest) and its attestations of one type."""
        ...


# Package indexes and wheels -----------------------------------------------------------------


class PackageIndex(Protocol):
    """A package index's simple API (PEP 503/691): a project's files and a wheel's METADATA."""

    def files(self, index: str, project: str) -> tuple[IndexFile, ...]:
        """Every file the index lists for `project` (`InputError` naming the URL)."""
        ...

    def metadata(self, file: IndexFile) -> str:
        """The METADATA of one wheel: PEP 658's file where the index has it, else read from
        the wheel itself (a ranged or whole download)."""
        ...


@dataclass(frozen=True)
class LocalWheel:
    """A wheel on this machine: its file name, sha256 and METADATA text."""

    filename: str
    sha256: str
    metadata: str


class Wheelhouse(Protocol):
    """The torch wheels in folders of this machine."""

    def torch_wheels(self, folder: Path) -> tuple[LocalWheel, ...] | None:
        """The torch wheels in `folder`, by name; None when there is no such folder."""
        ...


# Results ------------------------------------------------------------------------------------


class RunStore(Protocol):
    """Where one run's records go (`results/<run-id>/`): written atomically, read back typed."""

    @property
    def run_id(self) -> str:
        """The run's id."""
        ...

    @property
    def root(self) -> Path:
        """The run's folder."""
        ...

    def log_file(self, name: str, stage: str = "build") -> Path:
        """The full log of one image's stage."""
        ...

    def write_log(self, name: str, stage: str, text: str) -> None:
        """Write the full log of one image's stage (`log_file`)."""
        ...

    def append_report_to(self, name: str, target: Path) -> None:
        """Append a report file of the run (summary.md) to a file outside it: GitHub's step
        summary."""
        ...

    def update_image(self, name: str, record: ImageRecord) -> None:
        """Merge the sections of `record` into the image's record on disk."""
        ...

    def images(self) -> dict[str, ImageRecord]:
        """Every image record of this run, by name."""
        ...

    def write_report(self, name: str, text: str) -> None:
        """A report file of the run (summary.md, junit.xml)."""
        ...

    def write_publish(self, records: list[PublishRecord]) -> None:
        """publish.json."""
        ...

    def write_artifact(self, name: str, data: Any) -> Path:
        """Another JSON file of the run (a package list, an SBOM); its path."""
        ...
