"""Adapter: run the probes inside a container of an image, and take it away afterwards.

One container per image: the probes are copied in with `put_archive` (works
with a remote engine, where a bind mount would not), all probes run in one
Python process, the container is waited for with a timeout, killed when it
runs over, and always removed, Ctrl-C included. Containers carry imagekit
labels so `imagekit gc` can collect any that a killed run leaves. The container
is fenced in (`hardening`): a probe is code run inside an image under test.
"""

from __future__ import annotations

import contextlib
import io
import secrets
import tarfile
import time
from pathlib import Path
from typing import Any, TypedDict

import docker
import docker.errors
import docker.types
import requests.exceptions
import urllib3.exceptions
from docker.models.containers import Container

from imagekit.adapters.engine import (
    ENGINE_WENT_AWAY,
    endpoint,
    engine_errors,
    engine_info,
    engine_went_away,
    without_entrypoint,
)
from imagekit.adapters.engine_facts import container_limits, gpu_device_requests
from imagekit.adapters.orphans import owner
from imagekit.core import labels as L
from imagekit.core.ports import EngineInfo, NodesRequest, NodesRun, ProbeRequest, ProbeRun
from imagekit.core.probe_contract import ProbeDevice, ProbeExpectations
from imagekit.core.probe_nodes import RDZV_PORT, NodeOutput, nodes_command
from imagekit.core.probes import runner_command
from imagekit.errors import GpuUnavailableError

# The probes live in a volume of their own (put_archive can write there although the root
# filesystem is read-only); the volume goes with the container. Their folder is made by the
# archive, writable to the image's user, who must be able to remove the nonce file.
VOLUME = "/imagekit"
PROBE_DIR = f"{VOLUME}/probes"
NONCE_FILE = f"{PROBE_DIR}/.nonce"
KILL_GRACE_S = 10
# Scratch space for probes (compiler output, DDP's rendezvous files), in memory.
TMP_BYTES = 1 << 30
# Threads count as pids: torch starts a pool per core in each DDP rank.
PIDS_LIMIT = 4096
NO_GPU_HINT = (
    "the engine has no NVIDIA runtime (install the NVIDIA Container Toolkit), "
    "or run with --gpus none"
)


def probes_archive(folder: Path, nonce: str = "") -> bytes:
    """A tar of the probe files (root-owned, world-readable) and the run's nonce file (which
    the runner, running as the image's user, reads and removes), for `put_archive`."""
    buffer = io.BytesIO()
    files = [(p.name, p.read_bytes(), 0o644) for p in sorted(folder.glob("*.py"))]
    if nonce:
        files.append((NONCE_FILE.rsplit("/", 1)[1], nonce.encode(), 0o666))
    folder_name = PROBE_DIR.rsplit("/", 1)[1]
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(folder_name)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o777, 0
        archive.addfile(info)
        for name, data, mode in files:
            item = tarfile.TarInfo(f"{folder_name}/{name}")
            item.size, item.mode, item.mtime = len(data), mode, 0
            archive.addfile(item, io.BytesIO(data))
    return buffer.getvalue()


def image_user(client: docker.DockerClient, image: str) -> str:
    """The user probe containers of `image` run as (see `labels.workload_user`)."""
    with engine_errors(f"inspecting {image}"):
        attrs = client.images.get(image).attrs
    config = attrs.get("Config") or {}
    return L.workload_user(config.get("User") or "", config.get("Labels") or {})


class Hardening(TypedDict):
    """The keyword arguments of a probe container's creation that fence it in (docker-py's)."""

    cap_drop: list[str]
    security_opt: list[str]
    read_only: bool
    tmpfs: dict[str, str]
    pids_limit: int
    mem_limit: int
    mounts: list[docker.types.Mount]


def hardening(request: ProbeRequest) -> Hardening:
    """How a probe container is fenced in: no capabilities, no privilege gain, a read-only
    root filesystem with in-memory scratch space, and limits on processes and memory.

    No capability is added back: the probes compute, read files and talk over loopback, none
    of which needs one. The memory limit is what the probes declare they need, plus the
    shared memory and scratch space, which are memory too.
    """
    return {
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        # exec: Docker mounts a tmpfs noexec by default, and what torch.compile, Triton and
        # cpp_extension build in /tmp is a shared object they then load ("failed to map
        # segment from shared object"). nosuid and nodev stay.
        "tmpfs": {"/tmp": f"rw,exec,nosuid,nodev,size={TMP_BYTES}"},
        "pids_limit": PIDS_LIMIT,
        "mem_limit": request.memory_bytes + request.shm_bytes + TMP_BYTES,
        "mounts": [docker.types.Mount(target=VOLUME, source=None, type="volume")],
    }


class ContainerProbeRunner:
    """The `ProbeRunner` port: one container per request, removed whatever happens."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self._info: EngineInfo | None = None

    @property
    def info(self) -> EngineInfo:
        """The engine's facts: how it hands over GPUs, which limits it needs (read once)."""
        if self._info is None:
            self._info = engine_info(self.client)
        return self._info

    def run_nodes(self, request: NodesRequest) -> NodesRun:
        """A multi-node probe, one container per node (`NodesInContainers`)."""
        return NodesInContainers(self.client, self.info).run(request)

    def run(self, request: ProbeRequest) -> ProbeRun:
        """Run the request's probes in one container of its image."""
        nonce = secrets.token_hex(16)
        command = runner_command(
            "python3",
            PROBE_DIR,
            list(request.probes),
            request.expected,
            request.device,
            NONCE_FILE,
        )
        gpus = gpu_device_requests(self.info) if request.gpus else []
        started = time.monotonic()
        container = None
        try:
            container = self._start(request, command, gpus, nonce)
            start_s = time.monotonic() - started
            exit_code, timed_out = self._wait(container, request.timeout_s)
            with engine_errors(f"reading the probe output of {request.image}"):
                stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
                stderr = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        finally:
            if container is not None:
                # On failure `imagekit gc` collects it by its labels.
                with contextlib.suppress(
                    docker.errors.APIError, requests.exceptions.RequestException
                ):
                    container.remove(force=True, v=True)
        wall_s = time.monotonic() - started
        return ProbeRun.of(
            request,
            stdout,
            stderr,
            exit_code=exit_code,
            timed_out=timed_out,
            nonce=nonce,
            wall_s=wall_s,
            start_s=start_s,
        )

    def _start(
        self, request: ProbeRequest, command: list[str], gpus: list[Any], nonce: str
    ) -> Container:
        with engine_errors(f"creating a probe container of {request.image}"):
            try:
                # Full images start services by default; probes need none.
                entrypoint, argv = without_entrypoint(command)
                container = self.client.containers.create(
                    request.image,
                    argv,
                    entrypoint=entrypoint,
                    user=image_user(self.client, request.image),
                    labels={**request.labels, L.OWNER: owner()},
                    environment=dict(request.environment),
                    shm_size=request.shm_bytes,
                    # An init as PID 1: it reaps the DDP ranks, and a probe process that is
                    # killed dies (signals to PID 1 itself would be ignored).
                    init=True,
                    network_mode="none",  # probes need no network; DDP uses loopback
                    device_requests=gpus,
                    detach=True,
                    **hardening(request),
                    **container_limits(self.info),
                )
            except docker.errors.APIError as exc:
                raise _no_gpus(request.image, exc) from None
            try:
                container.put_archive(VOLUME, probes_archive(request.probes_dir, nonce))
                container.start()
            except docker.errors.APIError as exc:
                with contextlib.suppress(docker.errors.APIError):
                    container.remove(force=True, v=True)
                raise _no_gpus(request.image, exc) from None
        return container

    @staticmethod
    def _wait(container: Container, timeout_s: float) -> tuple[int | None, bool]:
        """The exit code, and whether it ran over its time (then it is killed)."""
        try:
            # Not under engine_errors: a read timeout here means "ran over", not "no engine".
            status = container.wait(timeout=timeout_s)
            return int(status.get("StatusCode", -1)), False
        except WAIT_FAILED as exc:
            if not ran_over(exc):
                raise engine_went_away(endpoint(), "waiting for a probe container", exc) from None
            with engine_errors("stopping a probe container that ran over"):
                # It may have ended on its own in the meantime: then there is nothing to kill
                # (the engine answers 409), and it still ran over its time.
                with contextlib.suppress(docker.errors.APIError):
                    container.kill()
                container.wait(timeout=KILL_GRACE_S)
            return None, True


# How a probe container's wait can fail: it ran over (the client's read timed out), or the
# engine went away (`ran_over` tells which).
WAIT_FAILED: tuple[type[BaseException], ...] = (
    *ENGINE_WENT_AWAY,
    requests.exceptions.ReadTimeout,
    requests.exceptions.ConnectionError,
)


def ran_over(exc: BaseException) -> bool:
    """Whether a failed wait is the client's read timeout (the container ran over), rather
    than the engine going away: over a unix socket docker-py reports a read timeout as a
    ConnectionError wrapping urllib3's ReadTimeoutError."""
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return True
    reason = exc.args[0] if exc.args else None
    return isinstance(reason, urllib3.exceptions.ReadTimeoutError) or "timed out" in str(exc)


class NodesInContainers:
    """A multi-node run as containers of one image: one per node, on a network of their own
    (internal: no way out), each running torchrun; the first node keeps the rendezvous."""

    def __init__(self, client: docker.DockerClient, info: EngineInfo) -> None:
        self.client = client
        self.info = info

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
                network = self.client.networks.create(
                    prefix, driver="bridge", internal=True, labels=dict(request.labels)
                )
            for node in range(request.nodes):
                containers.append(self._create(request, prefix, node, nonce))
            with engine_errors("starting the nodes"):
                for container in containers:
                    container.start()
            outputs = self._wait(containers, request.timeout_s - (time.monotonic() - started))
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
            )
        )
        user = image_user(self.client, request.image)
        with engine_errors(f"creating node {node} of {request.image}"):
            try:
                entrypoint, argv = without_entrypoint(command)
                container = self.client.containers.create(
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
                raise _no_gpus(request.image, exc) from None
            container.put_archive(VOLUME, probes_archive(request.probes_dir))
        return container

    @staticmethod
    def _wait(containers: list[Container], left_s: float) -> list[NodeOutput]:
        deadline = time.monotonic() + max(1.0, left_s)
        outputs = []
        for node, container in enumerate(containers):
            exit_code, timed_out = ContainerProbeRunner._wait(
                container, max(1.0, deadline - time.monotonic())
            )
            with engine_errors(f"reading the output of node {node}"):
                stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
                stderr = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
            outputs.append(NodeOutput(node, stdout, stderr, exit_code, timed_out))
        return outputs


def _no_gpus(image: str, exc: docker.errors.APIError) -> Exception:
    """GpuUnavailableError when the engine could not hand over GPUs; else the error itself."""
    text = str(exc.explanation or exc)
    if "could not select device driver" in text or "nvidia" in text.lower():
        return GpuUnavailableError(f"no GPUs for {image}: {text}", NO_GPU_HINT)
    return exc
