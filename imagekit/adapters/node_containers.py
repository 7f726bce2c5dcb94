"""Adapter: a multi-node probe as containers of one image, one per node, on a network of
their own; waited for as `node_wait` says, and always removed with their network."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container

from imagekit.adapters.engine import DockerEngine, engine_errors, without_entrypoint
from imagekit.adapters.engine_facts import container_limits, gpu_device_requests
from imagekit.adapters.node_wait import wait_for_nodes
from imagekit.adapters.orphans import owner
from imagekit.adapters.probe_container import (
    PROBE_DIR,
    VOLUME,
    hardening,
    image_user,
    no_gpus,
    probes_archive,
    stop_ran_over,
)
from imagekit.kernel import labels as L
from imagekit.kernel.engine import EngineInfo
from imagekit.verify.ports import NodesRequest, NodesRun, ProbeRequest
from imagekit.verify.probe_contract import ProbeDevice, ProbeExpectations
from imagekit.verify.probe_nodes import RDZV_PORT, NodeOutput, all_ranks_reported, nodes_command


class NodesInContainers:
    """A multi-node run as containers of one image: one per node, on a network of their own
    (internal: no way out), each running torchrun; the first node keeps the rendezvous."""

    def __init__(self, engine: DockerEngine) -> None:
        self.engine = engine

    @property
    def info(self) -> EngineInfo:
        """The engine's facts: how it hands over GPUs, which limits it needs."""
        return self.engine.info()

    def run(self, request: NodesRequest) -> NodesRun:
        """Start every node, wait for all within the time limit, collect their output; the
        containers and the network are gone however this ends."""
        nonce = secrets.token_hex(16)
        prefix = f"imagekit-nodes-{nonce[:10]}"
        started = time.monotonic()
        network = None
        containers: list[Container] = []
        try:
            with engine_errors(f"creating the network of a {request.nodes}-node probe"):
                network = self.engine.client.networks.create(
                    prefix, driver="bridge", internal=True, labels=dict(request.labels)
                )
            for node in range(request.nodes):
                containers.append(self._create(request, prefix, node, nonce))
            with engine_errors("starting the nodes"):
                for container in containers:
                    container.start()
            outputs = self._wait(
                request, containers, nonce, request.timeout_s - (time.monotonic() - started)
            )
        finally:
            for container in containers:
                with contextlib.suppress(
                    docker.errors.APIError, requests.exceptions.RequestException
                ):
                    container.remove(force=True, v=True)
            if network is not None:
                with contextlib.suppress(
                    docker.errors.APIError, requests.exceptions.RequestException
                ):
                    network.remove()
        return NodesRun(tuple(outputs), nonce, time.monotonic() - started)

    def _create(self, request: NodesRequest, prefix: str, node: int, nonce: str) -> Container:
        name = f"{prefix}-node{node}"
        command = nodes_command(
            "python3",
            PROBE_DIR,
            request.probe,
            nodes=request.nodes,
            nproc=request.nproc,
            endpoint=f"{prefix}-node0:{RDZV_PORT}",
            run_id=prefix,
            device=request.device,
            init_timeout_s=request.init_timeout_s,
        )
        # On one machine each node gets a GPU of its own: NCCL refuses one GPU in two ranks.
        gpus = gpu_device_requests(self.info, str(node)) if request.gpus else []
        fence = hardening(
            ProbeRequest(
                image=request.image,
                probes_dir=request.probes_dir,
                probes=(request.probe,),
                expected=ProbeExpectations(),
                device=ProbeDevice(request.device),
                gpus=request.gpus,
                timeout_s=request.timeout_s,
                shm_bytes=request.shm_bytes,
                memory_bytes=request.memory_bytes,
            ),
            self.info.cpus,
        )
        user = image_user(self.engine, request.image)
        with engine_errors(f"creating node {node} of {request.image}"):
            try:
                entrypoint, argv = without_entrypoint(command)
                container = self.engine.client.containers.create(
                    request.image,
                    argv,
                    entrypoint=entrypoint,
                    name=name,
                    hostname=name,  # torchrun keeps the store where the endpoint names itself
                    user=user,
                    labels={**request.labels, L.NODE: str(node), L.OWNER: owner()},
                    environment={**request.environment, "IMAGEKIT_PROBE_NONCE": nonce},
                    shm_size=request.shm_bytes,
                    init=True,
                    network=prefix,
                    device_requests=gpus,
                    detach=True,
                    **fence,
                    **container_limits(self.info),
                )
            except docker.errors.APIError as exc:
                raise no_gpus(request.image, exc) from None
            container.put_archive(VOLUME, probes_archive(request.probes_dir))
        return container

    @staticmethod
    def _wait(
        request: NodesRequest, containers: list[Container], nonce: str, left_s: float
    ) -> list[NodeOutput]:
        """Every node's output once all have ended or the time is up (`wait_for_nodes`: also
        a while after one ended, when those still running have reported all their ranks);
        those still running then are killed, and said to have run over."""
        codes = wait_for_nodes(
            [_exit_code_of(container, node) for node, container in enumerate(containers)],
            lambda node: all_ranks_reported(
                _logs(containers[node], node, stdout=True), nonce, request.nproc
            ),
            timeout_s=max(1.0, left_s),
            linger_s=request.linger_s,
        )
        outputs = []
        for node, (container, code) in enumerate(zip(containers, codes, strict=True)):
            if code is None:
                stop_ran_over(container, f"node {node}")
            stdout, stderr = (
                _logs(container, node, stdout=True),
                _logs(container, node, stdout=False),
            )
            outputs.append(NodeOutput(node, stdout, stderr, code, code is None))
        return outputs


def _logs(container: Container, node: int, *, stdout: bool) -> str:
    """What a node container has printed so far, to stdout or to stderr."""
    with engine_errors(f"reading the output of node {node}"):
        return str(container.logs(stdout=stdout, stderr=not stdout).decode("utf-8", "replace"))


def _exit_code_of(container: Container, node: int) -> Callable[[], int | None]:
    """Asks the engine for a node container's exit code; None while it runs."""

    def ask() -> int | None:
        with engine_errors(f"waiting for node {node}"):
            container.reload()
        state = container.attrs.get("State") or {}
        return None if state.get("Running", True) else int(state.get("ExitCode", -1))

    return ask
