"""In-memory stand-ins for the ports of `imagekit.core.ports`, shared by the unit tests.

Each follows the real signature of its port (mypy checks them against the Protocols at the end
of this file), so the use cases are tested as it runs, only without an engine or a registry.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from imagekit.adapters.engine import DockerEngine
from imagekit.adapters.results import RunFolder
from imagekit.audit.debian import Offered
from imagekit.audit.ports import ImageContents, IndexState
from imagekit.audit.release import ReleaseFacts, SecuritySuite
from imagekit.build.ports import ContextWriter
from imagekit.errors import GpuUnavailableError, RegistryError
from imagekit.events import Event
from imagekit.kernel.engine import Engine, EngineInfo, Layer, LocalImage
from imagekit.kernel.json import JsonObject, JsonValue
from imagekit.kernel.records import (
    LEVELS,
    AuditFinding,
    AuditRecord,
    Check,
    ImageRecord,
    ProbeResult,
    SecurityIndexRecord,
    Status,
    Timings,
    Verdict,
    VerifyRecord,
)
from imagekit.kernel.store import ContextFile, RunStore
from imagekit.kernel.vocabulary import (
    AttestationState,
    Ecosystem,
    FindingOrigin,
    FindingVerdict,
    Severity,
    Threshold,
)
from imagekit.publish.ports import (
    AttestationReader,
    Attested,
    Inventory,
    ManifestDocument,
    PushOutcome,
    Registry,
    RemoteManifest,
    SbomMaker,
    Signer,
)
from imagekit.resources import probes_dir
from imagekit.verify.levels import level_states, reached
from imagekit.verify.ports import (
    Inspector,
    NodesRequest,
    NodesRun,
    ProbeRequest,
    ProbeRun,
    ProbeRunner,
)
from imagekit.verify.probe_nodes import NodeOutput
from imagekit.verify.probes import RunnerOutput, discover

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


def image_id(text: str) -> str:
    """A well-formed image id derived from `text`."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@dataclass
class FakeEngine:
    """Images by reference and by id, their layers, tags given, and commands' output."""

    images: dict[str, LocalImage] = field(default_factory=dict)
    layers: dict[str, list[Layer]] = field(default_factory=dict)
    runtimes: tuple[str, ...] = ("runc",)
    pullable: dict[str, LocalImage] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)  # argv[0] -> what it prints
    tagged: list[tuple[str, str]] = field(default_factory=list)
    pulls: list[str] = field(default_factory=list)  # every reference asked for, in order
    lock: threading.Lock = field(default_factory=threading.Lock)
    facts: EngineInfo | None = None  # what info() says; default: a Docker with `runtimes`

    def add(
        self,
        reference: str,
        image: str,
        labels: Mapping[str, str] | None = None,
        size: int = 1,
        env: Mapping[str, str] | None = None,
    ) -> LocalImage:
        """Put an image in the engine under its reference and its id."""
        local = LocalImage(
            image,
            (reference,),
            dict(labels or {}),
            size,
            ("sha256:" + "1" * 64,),
            "2025-11-30",
            dict(env or {}),
        )
        with self.lock:
            self.images[reference] = self.images[image] = local
        return local

    def info(self) -> EngineInfo:
        return self.facts or EngineInfo(server_version="fake", runtimes=self.runtimes)

    def inspect_image(self, reference: str) -> LocalImage | None:
        with self.lock:
            return self.images.get(reference)

    def history(self, image_id: str) -> list[Layer]:
        return self.layers.get(image_id, [])

    def pull(self, reference: str, platform: str | None = None) -> str:
        self.pulls.append(reference)
        if reference not in self.pullable:
            return f"manifest for {reference} not found"
        with self.lock:
            self.images[reference] = self.pullable[reference]
        return ""

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        with self.lock:
            self.images[f"{repository}:{tag}"] = self.images[image_id]
            self.tagged.append((image_id, f"{repository}:{tag}"))

    def output_of(self, image_id: str, argv: list[str]) -> str:
        return self.outputs.get(argv[0], "")


def passing(probe: str, facts: Mapping[str, JsonValue] | None = None) -> ProbeResult:
    """A probe result that passed one check."""
    return ProbeResult(
        probe=probe,
        status=Status.PASS,
        checks=(Check(name=f"{probe} works", ok=True, detail="ok"),),
        facts=dict(facts or {}),
        duration_s=0.1,
    )


def verify_record(
    *results: ProbeResult,
    image: str = image_id("image"),
    structure: tuple[Check, ...] = (),
    **fields: Any,
) -> VerifyRecord:
    """A verify record of `image` that saw `results` (and `structure`); its status follows
    them, any other field can be given."""
    ok = not any(r.status.bad for r in results) and all(c.ok for c in structure)
    specs = discover(probes_dir())
    states = level_states(
        results,
        {name: spec.level for name, spec in specs.items()},
        None,
        inspection_ok=all(c.ok for c in structure),
        ran_on_gpu=False,
        cuda_image=False,
    )
    values: dict[str, Any] = {
        "level": reached(states),
        "levels": states,
        "required_levels": tuple(
            sorted({specs[r.probe].level for r in results if r.probe in specs}, key=LEVELS.index)
        ),
        "image_id": image,
        "reference": "imagekit-test/pytorch:tag",
        "labels": {},
        "device": "cpu",
        "status": "pass" if ok else "fail",
        "probes": results,
        "structure": structure,
        "timings": Timings(
            container_start_s=0.2,
            probe_wall_s=1.0,
            verify_wall_s=1.5,
            timeout_s=600.0,
            timed_out=False,
        ),
    }
    return VerifyRecord(**(values | fields))


Script = Callable[[ProbeRequest], ProbeRun]


@dataclass
class FakeProbeRunner:
    """Answers each request with what `script` makes of it (default: every probe passes,
    env reporting `env_facts`); `gpus_refused` plays an engine without the NVIDIA runtime."""

    env_facts: JsonObject = field(default_factory=dict)
    script: Script | None = None
    gpus_refused: bool = False
    requests: list[ProbeRequest] = field(default_factory=list)
    nodes_script: Callable[[NodesRequest], NodesRun] | None = None
    node_requests: list[NodesRequest] = field(default_factory=list)

    def run(self, request: ProbeRequest) -> ProbeRun:
        self.requests.append(request)
        if request.gpus and self.gpus_refused:
            raise GpuUnavailableError("no GPUs for the image: could not select device driver")
        if self.script is not None:
            return self.script(request)
        results = tuple(passing(p, self.env_facts if p == "env" else None) for p in request.probes)
        return run_of(results, device=request.device)

    def run_nodes(self, request: NodesRequest) -> NodesRun:
        self.node_requests.append(request)
        if self.nodes_script is not None:
            return self.nodes_script(request)
        return nodes_run(request, passing_nodes=request.nodes)


def nodes_run(request: NodesRequest, *, passing_nodes: int, timed_out: bool = False) -> NodesRun:
    """A multi-node run in which the first `passing_nodes` nodes' ranks reported a pass and
    the others printed nothing (they never joined, or died)."""
    nonce = "f00d"
    outputs = []
    for node in range(request.nodes):
        lines = ""
        if node < passing_nodes:
            rank = passing(request.probe, {"backend": "gloo", "transport": "TCP", "node": node})
            event = {**rank.to_json(), "event": "rank", "nonce": nonce}
            lines = json.dumps(event) + "\n"
        late = node >= passing_nodes
        outputs.append(
            NodeOutput(node, lines, "", None if late and timed_out else 0, late and timed_out)
        )
    return NodesRun(tuple(outputs), nonce, 2.0)


def run_of(
    results: tuple[ProbeResult, ...],
    *,
    device: str = "cpu",
    timed_out: bool = False,
    exit_code: int | None = 0,
) -> ProbeRun:
    """A probe run that reported `results`."""
    return ProbeRun(
        RunnerOutput(device, f"asked for {device}", results),
        log="".join(f"{r.probe}: {r.status}\n" for r in results),
        exit_code=exit_code,
        timed_out=timed_out,
        wall_s=1.0,
        start_s=0.2,
    )


@dataclass
class FakeInspector:
    """Structure checks that all hold, unless `failing` names some."""

    failing: tuple[str, ...] = ()
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def structure(
        self, image_id: str, labels: Mapping[str, str], labels_run: Mapping[str, str]
    ) -> list[Check]:
        self.seen.append((image_id, dict(labels_run)))
        names = ("default user is numeric and non-root", *self.failing)
        return [Check(name=n, ok=n not in self.failing, detail="seen") for n in names]


@dataclass
class FakeRegistry:
    """Tags with the config digest (image id) they hold; pushes read from the fake engine.

    `failures` is a queue of errors the next pushes report (a transient one is retried by
    the real adapter, not here: the fake reports what one whole push call ended as).
    `document` answers a tag, and `repository@digest` for whatever is pushed or put under a
    tag of that repository, as a registry does; `documents` holds what was put, and anything
    a test gives it by reference (it is asked first).
    """

    engine: FakeEngine
    tags: dict[str, RemoteManifest] = field(default_factory=dict)
    failures: list[PushOutcome] = field(default_factory=list)
    unreachable: bool = False
    pushed: list[str] = field(default_factory=list)
    documents: dict[str, ManifestDocument] = field(default_factory=dict)
    put_tags: list[str] = field(default_factory=list)
    # The engine keeps images in containerd: its image ids are the manifest digests a push
    # uploads unchanged, and the config digest is another hash.
    containerd_store: bool = False
    # The media type of the manifests a push uploads: a Docker engine's classic store
    # pushes Docker v2 manifests (application/vnd.docker.distribution.manifest.v2+json).
    pushed_media_type: str = OCI_MANIFEST

    def manifest(self, reference: str) -> RemoteManifest | None:
        if self.unreachable:
            raise RegistryError(f"cannot reach the registry of {reference}: connection refused")
        return self.tags.get(reference)

    def push(self, reference: str) -> PushOutcome:
        if self.failures:
            return self.failures.pop(0)
        local = self.engine.inspect_image(reference)
        assert local is not None, f"pushing {reference}, which the engine does not have"
        if self.containerd_store:
            self.tags[reference] = RemoteManifest(local.id, image_id(f"config {local.id}"))
        else:
            self.tags[reference] = RemoteManifest(image_id(f"manifest {local.id}"), local.id)
        self.pushed.append(reference)
        return PushOutcome(True, 1)

    def document(self, reference: str) -> ManifestDocument | None:
        if self.unreachable:
            raise RegistryError(f"cannot reach the registry of {reference}: connection refused")
        if reference in self.documents:
            return self.documents[reference]
        if "@" in reference:
            repository, _, digest = reference.partition("@")
            reference = next(
                (
                    tag
                    for tag, held in self.tags.items()
                    if tag.rpartition(":")[0] == repository and held.digest == digest
                ),
                "",
            )
            if reference in self.documents:
                return self.documents[reference]
        held = self.tags.get(reference)
        if held is None:
            return None
        body = json.dumps({"config": {"digest": held.config}}).encode()
        return ManifestDocument(self.pushed_media_type, body, held.digest, held.config)

    def put(self, reference: str, document: ManifestDocument) -> str:
        if self.unreachable:
            raise RegistryError(f"cannot reach the registry of {reference}: connection refused")
        self.documents[reference] = document
        self.tags[reference] = RemoteManifest(document.digest, document.config)
        self.put_tags.append(reference)
        return document.digest

    def list_tags(self, repository: str) -> tuple[str, ...]:
        if self.unreachable:
            raise RegistryError(f"cannot reach the registry of {repository}: connection refused")
        return tuple(t.rpartition(":")[2] for t in self.tags if t.rpartition(":")[0] == repository)


class FakePushResponse:
    """The engine's answer to one push request: its stream of JSON lines."""

    def __init__(self, items: list[JsonObject]) -> None:
        self.items, self.raw = items, None

    def raise_for_status(self) -> None:
        pass

    def iter_lines(self) -> Iterator[bytes]:
        return (json.dumps(item).encode() for item in self.items)

    def close(self) -> None:
        pass


class FakePushClient:
    """A docker client whose push requests (docker-py's APIClient is a requests session)
    answer with `streams` in turn; the last one answers every push after it."""

    base_url, api_version = "http+docker://localhost", "1.45"
    _auth_configs, credstore_env = None, None  # docker-py's credential lookup reads these

    def __init__(self, streams: list[list[JsonObject]]) -> None:
        self.api = self
        self.streams = list(streams)
        self.pushes = 0

    @property
    def engine(self) -> DockerEngine:
        """The engine adapter over this client, as `push` takes it."""
        return DockerEngine(self)  # type: ignore[arg-type]

    def post(self, *args: object, **kwargs: object) -> FakePushResponse:
        self.pushes += 1
        items = self.streams.pop(0) if len(self.streams) > 1 else self.streams[0]
        return FakePushResponse(items)


@dataclass
class FakeSbom:
    """An SBOM that lists the packages of the inventory it was given (Python, then OS), and
    keeps each inventory."""

    seen: list[Inventory] = field(default_factory=list)

    def image_sbom(self, inventory: Inventory) -> JsonObject:
        self.seen.append(inventory)
        packages = (*inventory.python_packages, *inventory.os_packages)
        return {"bomFormat": "CycloneDX", "components": [{"name": p.name} for p in packages]}


@dataclass
class FakeSigner:
    """Signatures and attestations by digest reference, as a registry would keep them beside
    the image; `failing` makes the next call of that kind ("sign", "attest") fail."""

    key: str = "cosign.key"
    signed: list[str] = field(default_factory=list)
    attestations: list[tuple[str, str, JsonObject]] = field(default_factory=list)
    failing: set[str] = field(default_factory=set)

    def sign(self, reference: str) -> str:
        assert "@sha256:" in reference, f"signing {reference}: a digest, never a tag"
        if "sign" in self.failing:
            return "cosign: signing key: decrypt: encrypted: decryption failed"
        self.signed.append(reference)
        return ""

    def attest(
        self, reference: str, predicate_type: str, predicate: Mapping[str, JsonValue]
    ) -> str:
        assert "@sha256:" in reference, f"attesting {reference}: a digest, never a tag"
        if "attest" in self.failing:
            return "cosign: PUT ...: 500 Internal Server Error"
        self.attestations.append((reference, predicate_type, json.loads(json.dumps(predicate))))
        return ""


@dataclass
class FakeAttestationReader:
    """Answers with what a signer attested (its key standing for the matching public key)."""

    signer: FakeSigner
    key: str = "cosign.key"

    def attested(self, reference: str, predicate_type: str) -> Attested:
        mine = [r for r in self.signer.signed if r == reference]
        if not self.signer.signed or not any(r == reference for r in self.signer.signed):
            return Attested(AttestationState.UNSIGNED, "the image is not signed")
        if self.key != self.signer.key:
            return Attested(AttestationState.OTHER_KEY, "the image is signed, but not by this key")
        digest = mine[0].rsplit("@", 1)[1]
        found = tuple(
            p for r, t, p in self.signer.attestations if r == reference and t == predicate_type
        )
        if not found:
            return Attested(
                AttestationState.NO_ATTESTATION, "no verify attestation signed by this key", digest
            )
        return Attested(AttestationState.OK, "", digest, found)


@dataclass
class Events:
    """An event sink that keeps what it is told."""

    seen: list[Event] = field(default_factory=list)

    def __call__(self, event: Event) -> None:
        self.seen.append(event)


@dataclass
class FakeContexts:
    """Build contexts kept by image name, as they were asked to be written; each one's folder
    is `root/<name>`, which holds nothing."""

    root: Path = Path("/contexts")
    written: dict[str, dict[str, ContextFile]] = field(default_factory=dict)

    def write_context(self, name: str, files: Mapping[str, ContextFile]) -> Path:
        self.written[name] = dict(files)
        return self.root / name


def store(tmp_path: Path) -> RunFolder:
    """A real run folder under `tmp_path` (it is plain files; no fake needed)."""
    return RunFolder.create(tmp_path / "results")


@dataclass(frozen=True)
class ReadCountingFolder(RunFolder):
    """A real run folder that notes each time every record is read back (`images`), for a use
    case that must build its reports from what it holds."""

    image_reads: list[str] = field(default_factory=list)  # one entry per `images()` call

    def images(self) -> dict[str, ImageRecord]:
        self.image_reads.append(self.run_id)
        return super().images()


# The fakes are the ports: mypy fails here when a port changes and a fake does not follow.
_engine: Engine = FakeEngine()
_runner: ProbeRunner = FakeProbeRunner()
_inspector: Inspector = FakeInspector()
_registry: Registry = FakeRegistry(FakeEngine())
_sbom: SbomMaker = FakeSbom()
_signer: Signer = FakeSigner()
_reader: AttestationReader = FakeAttestationReader(FakeSigner())
_store: RunStore = RunFolder(Path("results"), "run")
_contexts: ContextWriter = FakeContexts()
_run_contexts: ContextWriter = _store


def counting_file_sha256(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> list[Path]:
    """Replace `module`'s file_sha256 by one that records every file it hashes (in order)."""
    hashed: list[Path] = []
    real = module.file_sha256

    def counted(path: Path) -> str:
        hashed.append(path)
        return str(real(path))

    monkeypatch.setattr(module, "file_sha256", counted)
    return hashed


# The audit's world ------------------------------------------------------------------------

OS_RELEASE = (
    'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
    "VERSION_CODENAME=bookworm\n"
)
STATUS = """\
Package: libssl3
Status: install ok installed
Architecture: amd64
Source: openssl
Version: 3.0.20-1~deb12u2

Package: tzdata
Status: install ok installed
Architecture: all
Version: 2026f-0+deb12u1
"""


class FakeContents:
    """An image's files as an audit reads them: Debian 12 with these dpkg records."""

    def __init__(self, status: str = STATUS, python: Mapping[str, str] | None = None) -> None:
        self.status, self.python = status, dict(python or {"setuptools": "69.0.0"})
        self.read: list[str] = []

    def contents(self, image: str) -> ImageContents:
        self.read.append(image)
        return ImageContents(OS_RELEASE, self.status, self.python)


class FakeIndexes:
    """A security suite that offers these packages."""

    def __init__(self, offered: dict[str, Offered]) -> None:
        self.offered = offered
        self.asked: list[SecuritySuite] = []

    def state(self, suite: SecuritySuite) -> IndexState:
        self.asked.append(suite)
        facts = ReleaseFacts("bookworm-security", "Sun, 06 Dec 2026 02:54:29 UTC", "", {})
        return IndexState(suite, facts, "ab" * 32, self.offered)


def audit_record(
    *pending: tuple[str, str, str],
    image: str = "sha256:" + "a" * 64,
    at: str = "2026-12-07T00:00:00+00:00",
    end_of_patch: str | None = None,
) -> AuditRecord:
    """An audit of `image` at any-fix, each (package, installed, fixed) a refused fix."""
    findings = tuple(
        AuditFinding(
            id=f"{package}@{fixed}",
            package=package,
            installed=installed,
            fixed=fixed,
            severity=Severity.UNKNOWN,
            origin=FindingOrigin.SECURITY_INDEX,
            ecosystem=Ecosystem.OS,
            source=package,
            verdict=FindingVerdict.REFUSED,
        )
        for package, installed, fixed in pending
    )
    index = SecurityIndexRecord(
        suite="bookworm-security", url="http://x/InRelease", date="d", packages_sha256="s"
    )
    return AuditRecord(
        image_id=image,
        reference="r",
        audited_at=at,
        distro="debian-12",
        security_index=index,
        threshold=Threshold.ANY_FIX,
        status=Verdict.of(not findings),
        os_packages=166,
        python_packages=40,
        sources=("security-index",),
        findings=findings,
        end_of_patch=end_of_patch,
    )
