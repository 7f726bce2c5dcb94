"""The use case of `imagekit probe`: the probes in this Python environment, and the document
that records them (the same results a container run gives, with the host they ran on)."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import TypedDict

from imagekit import __version__
from imagekit.errors import ProbeFailedError
from imagekit.kernel.json import JsonObject
from imagekit.kernel.records import Verdict
from imagekit.kernel.runtime import DEFAULT_SHM_BYTES, time_limit_s
from imagekit.kernel.text import table
from imagekit.verify.nodes import add_nodes, nodes_request
from imagekit.verify.ports import ProbeRequest, ProbeRun, ProbeRunner
from imagekit.verify.probe_contract import ProbeDevice, ProbeExpectations
from imagekit.verify.probes import discover, multi_node, overall, select
from imagekit.verify.requests import ProbeSettings


def probe_here(runner: ProbeRunner, probes_dir: Path, settings: ProbeSettings) -> ProbeRun:
    """Run the probes asked for (default: all) through `runner`, with their time limit; with
    `nodes` > 1 the multi-node probe too, as that many local torchrun nodes on loopback."""
    device, timeout_s, nodes = settings.device, settings.timeout_s, settings.nodes
    specs = discover(probes_dir)
    chosen = select(specs, list(settings.probes) or None)
    request = ProbeRequest(
        image="",
        probes_dir=probes_dir,
        probes=tuple(s.name for s in chosen),
        expected=ProbeExpectations(),
        device=device,
        gpus=device is not ProbeDevice.CPU,
        timeout_s=time_limit_s(timeout_s, (s.timeout_s for s in chosen)),
        shm_bytes=DEFAULT_SHM_BYTES,
    )
    run = runner.run(request)
    if nodes > 1:
        across = nodes_request(
            multi_node(specs),
            image="",
            probes_dir=probes_dir,
            nodes=nodes,
            gpus=run.output.device.startswith("cuda"),
            timeout_s=timeout_s,
            shm_bytes=DEFAULT_SHM_BYTES,
            labels={},
        )
        run = add_nodes(runner, across, run)
    return run


class HostJson(TypedDict):
    """The machine a host-mode run ran on."""

    hostname: str
    python: str


class HostDocument(TypedDict):
    """The results document of a host-mode run (`imagekit probe --out FILE`)."""

    schema_version: int
    mode: str
    imagekit_version: str
    host: HostJson
    device: str
    device_reason: str
    status: str
    wall_s: float
    probes: list[JsonObject]  # each probe's result, as its record holds it


def host_document(run: ProbeRun) -> HostDocument:
    """The results document of a host-mode run (`imagekit probe --out FILE`)."""
    return {
        "schema_version": 1,
        "mode": "host",
        "imagekit_version": __version__,
        "host": {"hostname": platform.node(), "python": platform.python_version()},
        "device": run.output.device,
        "device_reason": run.output.device_reason,
        "status": overall(run.output.results),
        "wall_s": round(run.wall_s, 3),
        "probes": [r.to_json() for r in run.output.results],
    }


def result_table(run: ProbeRun) -> str:
    """What `imagekit probe` prints: one row per probe (name, status, reason, metrics)."""
    return table(["PROBE", "STATUS", "REASON", "METRICS"], result_rows(run))


def verdict_line(run: ProbeRun) -> str:
    """The run's verdict, where it ran and in how long: `pass on cpu (...) in 3.2s`."""
    output, took = run.output, f"{run.wall_s:.1f}s"
    return f"{overall(output.results)} on {output.device} ({output.device_reason}) in {took}"


def probe_failure(run: ProbeRun) -> ProbeFailedError | None:
    """What `imagekit probe` exits with (5) when a probe did not pass; None when all did."""
    if overall(run.output.results) == Verdict.PASS:
        return None
    return ProbeFailedError(f"probes failed on {run.output.device}")


def result_rows(run: ProbeRun) -> list[list[str]]:
    """One table row per probe: name, status, reason, metrics."""
    return [
        [
            r.probe,
            r.status.value,
            r.reason[:60],
            ", ".join(f"{k}={v:g}" for k, v in sorted(r.metrics.items()))[:70],
        ]
        for r in run.output.results
    ]
