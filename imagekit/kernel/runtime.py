"""How imagekit runs containers of its images, decided once. Pure.

`verify`, `probe` and `run` share these: the shared-memory size, whether to hand GPUs to a
container, and how long a set of probes may take.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from imagekit.errors import InputError
from imagekit.kernel.vocabulary import WHEEL_MACHINES, EngineName, GpuMechanism

# Docker's default /dev/shm is 64 MB; NCCL and DataLoader workers need more.
MIN_SHM_BYTES = 1 << 30
DEFAULT_SHM_BYTES = 2 << 30
# Container start and `import torch` on a slow machine, on top of the probes' own limits.
START_MARGIN_S = 60
# How long the ranks of a multi-node probe wait for each other (rendezvous, process group).
DEFAULT_INIT_TIMEOUT_S = 120
# How long the nodes of a multi-node probe may run on once one has ended and they have reported
# all their ranks. Their ranks are done, and torchrun's exit takes seconds; what can run on
# after that is its exit barrier, 300 s for an agent that never comes (adapters/node_wait.py).
NODE_LINGER_S = 30
# An image of another architecture than the engine's host (linux/arm64 on x86_64) runs through
# qemu-user: Python and torch's CPU kernels run many times slower than natively. Every time
# limit of such a run is stretched by this factor, so a slow run is not reported as a hang
# (measured: README.md, "arm64 under emulation").
EMULATION_SLOWDOWN = 10
# What an emulated run prints that the image does not: oneDNN (under torch) reads the CPU's
# MIDR_EL1 register from sysfs, which qemu-user does not provide; on a real arm64 CPU it is
# there and nothing is printed. Lines holding these are not held against an emulated image.
EMULATION_NOISE = ("Can't open MIDR_EL1 sysfs entry",)
# The CPU qemu-user emulates for an image's architecture. Left to itself qemu emulates its
# `max` CPU: every feature it knows, SVE up to 2048 bits. Torch picks its CPU kernels, and
# inductor its C++ flags, by the CPU it sees, so an emulated run asks for the CPU the images
# are for. Grace (GH200, GB200) is an Arm Neoverse V2: Armv9.0-A, SVE2 at 128 bits, BF16,
# I8MM. qemu (10.0) has no V2; its Neoverse N2 is the same ISA with the same vector length
# (qemu 8.2 and later). On `max`, inductor compiles for 256-bit SVE, which no Grace has, and
# Debian 12's g++ 12 crashes on torch's precompiled header for it (README, "arm64 under
# emulation"): the run would fail on what a Grace never does.
EMULATED_CPUS = {"arm64": "neoverse-n2"}
# The engine reports its host's machine (`docker info`: x86_64, aarch64); images say amd64/arm64.
_HOST_ARCHS = {machine: p.split("/")[1] for p, machine in WHEEL_MACHINES.items()}


class GpuChoice(StrEnum):
    """`--gpus`: auto (when the engine or host has them), all, or none."""

    AUTO = "auto"
    ALL = "all"
    NONE = "none"


def use_gpus(choice: GpuChoice, gpus_available: bool) -> bool:
    """Whether to ask for GPUs: always with `all`, never with `none`, if there are any with
    `auto`."""
    return choice is GpuChoice.ALL or (choice is GpuChoice.AUTO and gpus_available)


def time_limit_s(
    asked_s: float | None, probe_limits_s: Iterable[float], slowdown: float = 1
) -> float:
    """The time limit of one probe run: what was asked, else the probes' limits plus a margin,
    times `slowdown` (EMULATION_SLOWDOWN for an emulated image)."""
    if asked_s is not None:
        return asked_s
    return (sum(probe_limits_s) + START_MARGIN_S) * slowdown


def without_emulation_noise(text: str) -> str:
    """`text` without the lines only emulation prints (`EMULATION_NOISE`)."""
    lines = text.splitlines()
    return "\n".join(line for line in lines if not any(n in line for n in EMULATION_NOISE))


def docker_arch(machine: str) -> str:
    """The architecture a Docker platform names for a host's machine: x86_64 -> amd64."""
    return _HOST_ARCHS.get(machine, machine)


def runs_emulated(image_platform: str, engine_architecture: str | None) -> bool:
    """Whether the engine runs an image of `image_platform` (`linux/arm64[/v8]`) through
    emulation: the image's architecture is not the engine host's. False when either is
    unknown."""
    parts = image_platform.split("/")
    host = engine_architecture or ""
    if len(parts) < 2 or not host:
        return False
    return parts[1] != docker_arch(host)


@dataclass(frozen=True)
class Emulation:
    """How the probes of one image run: natively, or through qemu-user as `cpu` with every
    time limit stretched by `slowdown`."""

    emulated: bool = False
    cpu: str = ""  # the qemu CPU model; "" for qemu's default
    slowdown: float = 1
    # What the containers get: qemu-user reads its CPU model from QEMU_CPU.
    environment: Mapping[str, str] = field(default_factory=dict)


NATIVE = Emulation()


def emulation_for(image_platform: str, engine_architecture: str | None) -> Emulation:
    """How an engine on `engine_architecture` runs an image of `image_platform`: natively, or
    emulated as the CPU the images are for (`EMULATED_CPUS`), `EMULATION_SLOWDOWN` slower."""
    if not runs_emulated(image_platform, engine_architecture):
        return NATIVE
    cpu = EMULATED_CPUS.get(image_platform.split("/")[1], "")
    return Emulation(
        emulated=True,
        cpu=cpu,
        slowdown=EMULATION_SLOWDOWN,
        environment={"QEMU_CPU": cpu} if cpu else {},
    )


def silent_gpu_drop(
    choice: GpuChoice, engine_name: EngineName, gpu_mechanism: GpuMechanism
) -> bool:
    """Whether `--gpus all` would be dropped without a word: Podman's Docker API ignores
    device requests it cannot pass (before 5.4, every one), where Docker refuses them."""
    podman = engine_name == EngineName.PODMAN
    return choice is GpuChoice.ALL and podman and gpu_mechanism == GpuMechanism.NONE


def time_limit(option: str, seconds: float | None) -> None:
    """A time limit, when given, is a positive number of seconds."""
    if seconds is not None and not seconds > 0:
        raise InputError(
            f"{option} {seconds:g} is not a time limit", "give seconds > 0, or leave it out"
        )
