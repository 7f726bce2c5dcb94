"""The multi-node probe, as verify and host-mode probing run it: across `nodes` nodes of one
rank each (a GPU each where there are GPUs), combined into one probe result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from imagekit.kernel.runtime import (
    DEFAULT_INIT_TIMEOUT_S,
    NATIVE,
    NODE_LINGER_S,
    Emulation,
    time_limit_s,
)
from imagekit.verify.ports import NodesRequest, ProbeRun, ProbeRunner
from imagekit.verify.probe_contract import ProbeDevice
from imagekit.verify.probe_nodes import combine_nodes
from imagekit.verify.probes import ProbeSpec


def nodes_request(
    spec: ProbeSpec,
    *,
    image: str,
    probes_dir: Path,
    nodes: int,
    gpus: bool,
    timeout_s: float | None,
    shm_bytes: int,
    labels: Mapping[str, str],
    emulation: Emulation = NATIVE,
) -> NodesRequest:
    """The multi-node probe `spec` across `nodes` nodes of one rank each; `emulation` stretches
    the time limits and sets the emulated CPU (an image of another architecture). Pure."""
    return NodesRequest(
        image=image,
        probes_dir=probes_dir,
        probe=spec.name,
        nodes=nodes,
        nproc=1,
        device=ProbeDevice.CUDA if gpus else ProbeDevice.CPU,
        gpus=gpus,
        timeout_s=time_limit_s(timeout_s, (spec.timeout_s,), emulation.slowdown),
        init_timeout_s=min(spec.timeout_s / 2, DEFAULT_INIT_TIMEOUT_S) * emulation.slowdown,
        linger_s=NODE_LINGER_S * emulation.slowdown,
        shm_bytes=max(shm_bytes, spec.shm_bytes),
        memory_bytes=spec.memory_bytes,
        labels=labels,
        environment=emulation.environment,
    )


def add_nodes(runner: ProbeRunner, request: NodesRequest, run: ProbeRun) -> ProbeRun:
    """`run` with the result of the multi-node run `request`, and every node's log, added."""
    across = runner.run_nodes(request)
    result = combine_nodes(
        request.probe,
        across.outputs,
        nproc=request.nproc,
        nonce=across.nonce,
        device=request.device,
    )
    output = replace(run.output, results=(*run.output.results, result))
    return replace(run, output=output, log=run.log + across.log)
