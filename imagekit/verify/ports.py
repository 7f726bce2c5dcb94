"""What verify needs from the world: probe runners and the inspector. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from imagekit.kernel.records import Check
from imagekit.verify.probe_contract import ProbeDevice, ProbeExpectations
from imagekit.verify.probe_nodes import NodeOutput
from imagekit.verify.probes import RunnerOutput, parse_events


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
    device: ProbeDevice
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
