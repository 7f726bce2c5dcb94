"""The domain's closed sets, each spelled once: platforms, flavours, engines, stores, states.

Every value is a `StrEnum`, so it compares equal to the text it stands for, serialises to it in
JSON and records, and is what Typer offers as `choices=`; a typo becomes a type error rather
than a silent mismatch. Pure.
"""

from __future__ import annotations

from enum import StrEnum


class Platform(StrEnum):
    """The Docker platforms imagekit builds for: the two PyTorch ships Linux wheels for."""

    AMD64 = "linux/amd64"
    ARM64 = "linux/arm64"


# The machine each platform's wheels are built for (`..._aarch64.whl`), keyed by any text.
WHEEL_MACHINES: dict[str, str] = {Platform.AMD64: "x86_64", Platform.ARM64: "aarch64"}


class Flavour(StrEnum):
    """What an image is for: `slim` the runtime only, FROM the base; `full` the workstation
    (compilers, Jupyter, sshd), FROM the slim of its cell. Listed in build order."""

    SLIM = "slim"
    FULL = "full"

    @property
    def workstation(self) -> bool:
        """FROM its cell's runtime image, adding compilers, Jupyter, sshd and the entrypoint;
        else a runtime image FROM the base, whose builder stage makes and prunes the venv."""
        return self in WORKSTATIONS


# A flavour's one rule. Code asks what a flavour is, never which: a new one is its member
# and, if it is a workstation, its place here.
WORKSTATIONS = frozenset({Flavour.FULL})


class EngineName(StrEnum):
    """Which engine serves the Docker API: Podman's differs in ways imagekit works around."""

    DOCKER = "docker"
    PODMAN = "podman"


class Runtime(StrEnum):
    """What runs the probe processes: the engine's containers, or an HPC runtime on the image
    exported from the engine (`imagekit export`), as the invoking user."""

    DOCKER = "docker"  # the engine's containers (Docker or Podman)
    CHARLIECLOUD = "charliecloud"
    APPTAINER = "apptainer"
    ENROOT = "enroot"

    @property
    def exported(self) -> bool:
        """Whether it runs the image's exported root filesystem rather than a container."""
        return self is not Runtime.DOCKER


class BuilderName(StrEnum):
    """What builds an image: the legacy builder (through the Docker SDK) or BuildKit (through
    `docker buildx`)."""

    SDK = "sdk"
    BUILDX = "buildx"


class ImageStore(StrEnum):
    """Where an engine keeps its images, which decides what its image ids are digests of."""

    CLASSIC = "classic"  # Docker's graph drivers: the id is the config digest
    CONTAINERD = "containerd"  # containerd's store: the id is the manifest or index digest
    PODMAN = "podman"  # containers/storage: the config digest


class ImageIdKind(StrEnum):
    """What an engine's image ids are digests of: the image's config, or its manifest (or index)."""

    CONFIG = "config"
    MANIFEST = "manifest"


class GpuMechanism(StrEnum):
    """How a container of an engine is given the GPUs."""

    NVIDIA_RUNTIME = "nvidia-runtime"  # the NVIDIA container toolkit's runtime: `--gpus all`
    CDI = "cdi"  # CDI devices `nvidia.com/gpu=all` (Podman, newer Docker)
    NONE = "none"


class AttestationState(StrEnum):
    """What checking an image's signature and attestations of one type against a key found."""

    OK = "ok"  # signed by the key, and attested by it
    UNSIGNED = "unsigned"  # no signature at all
    OTHER_KEY = "other key"  # signatures, none by this key
    NO_ATTESTATION = "no attestation"  # signed, but no attestation of the type by this key
    ERROR = "error"  # the registry or the tool failed


class TagKind(StrEnum):
    """The tags publish pushes."""

    VERSIONED = "versioned"  # immutable: pushed only where absent or holding the same content
    ALIAS = "alias"  # moves to the newest image
    CANDIDATE = "candidate"  # a CI candidate's, before promotion
    PLATFORM = "platform"  # one platform's own, under an index (recorded as versioned)
    PATCH = "patch"  # `{versioned}-pN`: a rebuild of a published image, immutable like it


class PushFailure(StrEnum):
    """Whether pushing again can help after a push failed this way."""

    TRANSIENT = "transient"  # a dropped connection, a 5xx, a timeout
    PERMANENT = "permanent"  # denied, invalid, unknown


class Severity(StrEnum):
    """How bad an audit finding is, as advisories grade them (CVSS's bands). `unknown`: its
    source gives none (a distribution's security index grades nothing)."""

    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    UNKNOWN = "unknown"


class FindingOrigin(StrEnum):
    """Where an audit finding comes from."""

    SECURITY_INDEX = "security-index"  # the distribution's security suite
    OSV = "osv"  # an OSV database given offline
    TRIVY = "trivy"
    GRYPE = "grype"


class Ecosystem(StrEnum):
    """Which kind of package an audit finding is about."""

    OS = "os"  # a dpkg package
    PYTHON = "python"  # a Python distribution in the image's environment


class Threshold(StrEnum):
    """What fails an audit (audit/policy.py says how each does)."""

    ANY_FIX = "any-fix"
    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    NONE = "none"


class FindingVerdict(StrEnum):
    """What one finding means for its image."""

    REFUSED = "refused"  # at or above the threshold, not allowlisted
    ALLOWED = "allowed"  # accepted by an allowlist entry
    OUTDATED = "outdated"  # allowlisted, but fixed since: the entry is outdated
    NOTED = "noted"  # below the threshold
