"""Can this image use this host's GPUs? Decided from labels and nvidia-smi facts alone. Pure.

The answer comes before anyone pulls or starts the image: the driver must be new enough for the
image's CUDA (fully, or under CUDA's minor-version compatibility with its limits), and every GPU
must be one the image has machine code for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from imagekit.errors import GpuMismatchError
from imagekit.kernel import labels as L
from imagekit.kernel.engine import EngineInfo
from imagekit.kernel.labels import ImageLabels
from imagekit.kernel.publish_records import AttestedLevel
from imagekit.kernel.runtime import docker_arch, runs_emulated
from imagekit.kernel.vocabulary import GpuMechanism
from imagekit.matrix.compat import CompatData, version_key


class Severity(StrEnum):
    """How a finding weighs: `none` is an absence that is not a fault (no GPU on a host that
    runs CPU images); only `fail` makes an image's verdict "cannot use the GPUs here"."""

    OK = "ok"
    NONE = "none"
    WARN = "warn"
    FAIL = "fail"


class Verdict(StrEnum):
    """Whether an image can use this host's GPUs (or needs none)."""

    RUNS = "runs"
    LIMITED = "runs with limits"
    CANNOT = "cannot use the GPUs here"
    NO_GPU = "no GPU here"  # a CUDA image on a host without an NVIDIA driver
    UNKNOWN = "unknown"  # not an imagekit image: no labels to judge it by


OK, NONE, WARN, FAIL = Severity.OK, Severity.NONE, Severity.WARN, Severity.FAIL
MARKS = {OK: "ok  ", NONE: "--  ", WARN: "WARN", FAIL: "FAIL"}


@dataclass(frozen=True)
class Gpu:
    """One GPU: its index, name and compute capability (`9.0`)."""

    index: int
    name: str
    capability: str

    @property
    def arch(self) -> str:
        """ "sm_90" for capability 9.0."""
        return "sm_" + self.capability.replace(".", "")


@dataclass(frozen=True)
class HostGpus:
    """The driver and GPUs of a host; `driver` None and no GPUs where there is no driver."""

    driver: str | None
    gpus: tuple[Gpu, ...] = ()
    source: str = ""
    problems: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Finding:
    """One thing the doctor found: ok, warn or fail, and what it means."""

    level: Severity
    text: str


@dataclass(frozen=True)
class Assessment:
    """The verdict for one image on this host, and the findings behind it."""

    image: str
    verdict: Verdict
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def runs(self) -> bool:
        """Whether the image can use this host's GPUs (perhaps with limits), or needs none."""
        return self.verdict in (Verdict.RUNS, Verdict.LIMITED)


def newest_cuda_for(driver: str, data: CompatData) -> str | None:
    """The newest CUDA version whose minimum driver `driver` meets."""
    fits = [c for c, f in data.cuda.items() if version_key(driver) >= version_key(f.min_driver)]
    return max(fits, key=version_key) if fits else None


def arch_runs(gpu: Gpu, archs: list[str]) -> str | None:
    """The compiled architecture that runs on `gpu`, or None.

    Machine code for sm_XY runs on GPUs of the same major version and a minor version >= Y
    (sm_80 code runs on an sm_86 GPU); never across major versions.
    """
    if gpu.arch in archs:
        return gpu.arch
    major, minor = (int(x) for x in gpu.capability.split("."))
    same_major = []
    for arch in archs:
        digits = arch.removeprefix("sm_").rstrip("af")
        if digits.isdigit() and len(digits) >= 2:
            a_major, a_minor = int(digits[:-1]), int(digits[-1])
            if a_major == major and a_minor <= minor and not arch.endswith(("a", "f")):
                same_major.append((a_minor, arch))
    return max(same_major)[1] if same_major else None


def host_findings(host: HostGpus) -> list[Finding]:
    """What the host itself has, for the report without an image."""
    if not host.driver:
        reasons = "; ".join(host.problems) or "no NVIDIA driver found"
        # Not a fault on its own: CPU images run here; a CUDA image's check says FAIL.
        return [Finding(NONE, f"no NVIDIA GPU on this host (CPU images only): {reasons}")]
    found = [Finding(OK, f"NVIDIA driver {host.driver} (from {host.source})")]
    if not host.gpus:
        found.append(Finding(WARN, "the driver is loaded but nvidia-smi listed no GPU"))
    for gpu in host.gpus:
        found.append(
            Finding(
                OK, f"GPU {gpu.index}: {gpu.name}, compute capability {gpu.capability} ({gpu.arch})"
            )
        )
    return found


def engine_findings(engine: EngineInfo | None, host: HostGpus, why_none: str = "") -> list[Finding]:
    """What the engine is and whether it can hand this host's GPUs to containers: through the
    NVIDIA runtime (`--gpus all`) or CDI devices (`nvidia.com/gpu=all`). `engine` None: none
    answered (`why_none`)."""
    if engine is None:
        return [Finding(WARN, f"no container engine answers: {why_none or 'not asked'}")]
    found = [Finding(OK, f"engine: {engine.describe()}")]
    found.append(
        Finding(
            OK,
            f"image ids on this engine are {engine.image_id_kind} digests; publish compares "
            f"them with the registry's {engine.image_id_kind} digest",
        )
    )
    if engine.rootless and engine.cgroup_version == "1":
        found.append(
            Finding(
                WARN,
                "a rootless engine on cgroup v1 applies no memory or process limits: a probe "
                "that runs away takes the machine's; cgroup v2 with systemd gives them back",
            )
        )
    if engine.remote:
        found.append(
            Finding(
                WARN,
                f"the engine is at {engine.endpoint}: the driver and GPUs above are this "
                "machine's, not the engine's; run doctor on the engine's machine for its GPUs",
            )
        )
    elif host.driver and engine.gpu_mechanism == GpuMechanism.NONE:
        found.append(
            Finding(
                FAIL,
                "this host has an NVIDIA driver, but the engine has neither the NVIDIA runtime "
                "nor CDI devices nvidia.com/gpu: containers get no GPU. Install the NVIDIA "
                "Container Toolkit, then `nvidia-ctk runtime configure` (Docker) or "
                "`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (Podman, Docker 25+)",
            )
        )
    return found


def assess(
    image: str, labels: dict[str, str], host: HostGpus, data: CompatData, machine: str = ""
) -> Assessment:
    """Whether the image whose labels are `labels` can use the GPUs of this host (whose
    machine is `machine`, `x86_64`; "": not checked), and why."""
    parsed = ImageLabels.parse(labels)
    cuda = parsed.cuda
    if not parsed.is_imagekit:
        return Assessment(
            image,
            Verdict.UNKNOWN,
            (Finding(FAIL, f"not an imagekit image (no {L.PREFIX}* labels); nothing to compare"),),
        )
    if runs_emulated(parsed.platform, machine):
        return _emulated(image, parsed.platform, machine, cuda)
    if not cuda:
        return Assessment(
            image, Verdict.RUNS, (Finding(OK, "a CPU image: it runs on any host and uses no GPU"),)
        )
    if not host.driver:
        reasons = "; ".join(host.problems) or "no NVIDIA driver found"
        return Assessment(
            image,
            Verdict.NO_GPU,
            (
                Finding(
                    FAIL,
                    f"this CUDA {cuda} image needs an NVIDIA GPU; this host has none ({reasons})",
                ),
            ),
        )
    need = parsed.min_driver or (data.cuda[cuda].min_driver if cuda in data.cuda else "")
    findings = [_driver_finding(host.driver, cuda, need, data), *_gpu_findings(host, parsed)]
    return Assessment(image, _verdict(findings), tuple(findings))


def _driver_finding(driver: str, cuda: str, need: str, data: CompatData) -> Finding:
    """Whether `driver` runs CUDA `cuda` (which needs `need`): fully, under minor-version
    compatibility, or not at all."""
    floor = data.cuda[cuda].compat_driver_floor if cuda in data.cuda else None
    if need and version_key(driver) >= version_key(need):
        return Finding(OK, f"driver {driver} >= {need}, the minimum for CUDA {cuda}")
    if floor and version_key(driver) >= version_key(floor):
        return Finding(
            WARN,
            f"driver {driver} is older than {need} (CUDA {cuda}) but >= {floor}: it runs under "
            "CUDA minor-version compatibility, without PTX JIT; kernels built for newer "
            "architectures than the image's machine code fail. Upgrade the driver to "
            f">= {need} for full support",
        )
    newest = newest_cuda_for(driver, data)
    instead = f"; this driver runs images up to CUDA {newest}" if newest else ""
    return Finding(FAIL, f"driver {driver} is too old for CUDA {cuda}: it needs >= {need}{instead}")


def _gpu_findings(host: HostGpus, parsed: ImageLabels) -> list[Finding]:
    """Whether each GPU of the host has machine code in the image."""
    archs = list(parsed.archs)
    if not host.gpus:
        return [Finding(WARN, "nvidia-smi listed no GPU: architectures not checked")]
    findings = []
    for gpu in host.gpus:
        runs = arch_runs(gpu, archs)
        what = f"GPU {gpu.index} ({gpu.name}, {gpu.arch})"
        if runs == gpu.arch:
            findings.append(Finding(OK, f"{what} is compiled in"))
        elif runs:
            findings.append(Finding(OK, f"{what} runs the image's {runs} code"))
        else:
            findings.append(
                Finding(
                    FAIL,
                    f"{what} has no machine code in the image "
                    f"(compiled for {' '.join(archs) or 'nothing'}); pick a CUDA variant that "
                    "targets it",
                )
            )
    return findings


def _verdict(findings: list[Finding]) -> Verdict:
    """The worst finding decides."""
    levels = {f.level for f in findings}
    if FAIL in levels:
        return Verdict.CANNOT
    return Verdict.LIMITED if WARN in levels else Verdict.RUNS


def _emulated(image: str, platform: str, machine: str, cuda: str | None) -> Assessment:
    """An image of another architecture than the host's: it runs through qemu-user (where
    binfmt_misc has it), slowly and without the GPU."""
    slow = f"a {platform} image on this {machine} host runs only under emulation (qemu-user)"
    if not cuda:
        return Assessment(
            image,
            Verdict.LIMITED,
            (Finding(WARN, f"{slow}: many times slower than on its own architecture"),),
        )
    return Assessment(
        image,
        Verdict.CANNOT,
        (
            Finding(
                FAIL,
                f"{slow}, without the GPU: the driver libraries the NVIDIA container toolkit "
                f"mounts are {machine} programs. Run it on a {platform} host (GH200, GB200), "
                f"or use the image's {docker_arch(machine)} platform here",
            ),
        ),
    )


def _marked(findings: Sequence[Finding]) -> list[str]:
    return [f"  {MARKS[f.level]} {f.text}" for f in findings]


def doctor_lines(
    machine: str,
    host: HostGpus,
    engine: Sequence[Finding],
    assessments: Sequence[Assessment],
    attested: Mapping[str, AttestedLevel],
) -> list[str]:
    """`imagekit doctor` for people: the host, the engine's `findings`, then each image."""
    lines = ["host:", f"  {MARKS[OK]} architecture: {machine}", *_marked(host_findings(host))]
    lines += ["engine:", *_marked(engine)]
    for a in assessments:
        found = attested.get(a.image)
        level = f"; attested level: {found.level or 'none'}" if found else ""
        lines += [f"{a.image}: {a.verdict}{level}", *_marked(a.findings)]
        if found:
            lines.append(f"  {MARKS[OK] if found.level else MARKS[WARN]} attestation: {found.why}")
    return lines


def gpu_refusal(
    assessments: Sequence[Assessment],
    cuda_images: set[str],
    engine: EngineInfo | None,
    host: HostGpus,
) -> GpuMismatchError | None:
    """Why doctor exits 7 (None: it does not): an image that cannot use this host's GPUs, or
    a CUDA image (`cuda_images`) where the driver is there but this engine's containers get no
    GPU."""
    refused = [a.image for a in assessments if not a.runs]
    if engine is not None and not engine.remote and host.driver and not engine.gpu_runtime:
        refused += [a.image for a in assessments if a.runs and a.image in cuda_images]
    if not refused:
        return None
    return GpuMismatchError(
        f"{len(refused)} of {len(assessments)} images cannot use this host's GPUs: "
        + ", ".join(refused),
        "see the FAIL lines above",
    )
