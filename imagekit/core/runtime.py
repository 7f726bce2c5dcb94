"""How imagekit runs containers of its images, decided once. Pure.

`verify`, `probe` and `run` share these: the shared-memory size, whether to hand GPUs to a
container, and how long a set of probes may take.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

# Docker's default /dev/shm is 64 MB; NCCL and DataLoader workers need more.
MIN_SHM_BYTES = 1 << 30
DEFAULT_SHM_BYTES = 2 << 30
# Container start and `import torch` on a slow machine, on top of the probes' own limits.
START_MARGIN_S = 60
# How long the ranks of a multi-node probe wait for each other (rendezvous, process group).
DEFAULT_INIT_TIMEOUT_S = 120


class GpuChoice(StrEnum):
    """`--gpus`: auto (when the engine or host has them), all, or none."""

    AUTO = "auto"
    ALL = "all"
    NONE = "none"


def use_gpus(choice: GpuChoice, gpus_available: bool) -> bool:
    """Whether to ask for GPUs: always with `all`, never with `none`, if there are any with
    `auto`."""
    return choice is GpuChoice.ALL or (choice is GpuChoice.AUTO and gpus_available)


def time_limit_s(asked_s: float | None, probe_limits_s: Iterable[float]) -> float:
    """The time limit of one probe run: what was asked, else the probes' limits plus a margin."""
    return asked_s if asked_s is not None else sum(probe_limits_s) + START_MARGIN_S


def silent_gpu_drop(choice: GpuChoice, engine_name: str, gpu_mechanism: str) -> bool:
    """Whether `--gpus all` would be dropped without a word: Podman's Docker API ignores
    device requests it cannot pass (before 5.4, every one), where Docker refuses them."""
    return choice is GpuChoice.ALL and engine_name == "podman" and gpu_mechanism == "none"
