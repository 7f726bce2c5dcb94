"""Adapter: run the probes inside a container of an image, and take it away afterwards.

One container per image: the probes are copied in with `put_archive` (works
with a remote engine, where a bind mount would not), all probes run in one
Python process, the container is waited for with a timeout, killed when it
runs over, and always removed, Ctrl-C included. Containers carry imagekit
labels so `imagekit gc` can collect any that a killed run leaves. The container
is fenced in (`probe_container.hardening`): a probe is code run inside an image under test.
"""

from __future__ import annotations

import contextlib
import secrets
import time

import docker
import docker.errors
import docker.types
import requests.exceptions
import urllib3.exceptions
from docker.models.containers import Container

from imagekit.adapters.engine import (
    ENGINE_WENT_AWAY,
    DockerEngine,
    endpoint,
    engine_errors,
    engine_went_away,
    without_entrypoint,
)
from imagekit.adapters.engine_facts import container_limits, gpu_device_requests
from imagekit.adapters.node_containers import NodesInContainers
from imagekit.adapters.orphans import owner
from imagekit.adapters.probe_container import (
    NONCE_FILE,
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
from imagekit.verify.ports import NodesRequest, NodesRun, ProbeRequest, ProbeRun
from imagekit.verify.probes import runner_command


class ContainerProbeRunner:
    """The `ProbeRunner` port: one container per request, removed whatever happens."""

    def __init__(self, engine: DockerEngine) -> None:
        self.engine = engine

    @property
    def info(self) -> EngineInfo:
        """The engine's facts: how it hands over GPUs, which limits it needs (read once)."""
        return self.engine.info()

    def run_nodes(self, request: NodesRequest) -> NodesRun:
        """A multi-node probe, one container per node (`NodesInContainers`)."""
        return NodesInContainers(self.engine).run(request)

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
        self,
        request: ProbeRequest,
        command: list[str],
        gpus: list[docker.types.DeviceRequest],
        nonce: str,
    ) -> Container:
        with engine_errors(f"creating a probe container of {request.image}"):
            try:
                # Full images start services by default; probes need none.
                entrypoint, argv = without_entrypoint(command)
                container = self.engine.client.containers.create(
                    request.image,
                    argv,
                    entrypoint=entrypoint,
                    user=image_user(self.engine, request.image),
                    labels={**request.labels, L.OWNER: owner()},
                    environment=dict(request.environment),
                    shm_size=request.shm_bytes,
                    # An init as PID 1: it reaps the DDP ranks, and a probe process that is
                    # killed dies (signals to PID 1 itself would be ignored).
                    init=True,
                    network_mode="none",  # probes need no network; DDP uses loopback
                    device_requests=gpus,
                    detach=True,
                    **hardening(request, self.info.cpus),
                    **container_limits(self.info),
                )
            except docker.errors.APIError as exc:
                raise no_gpus(request.image, exc) from None
            try:
                container.put_archive(VOLUME, probes_archive(request.probes_dir, nonce))
                container.start()
            except docker.errors.APIError as exc:
                with contextlib.suppress(docker.errors.APIError):
                    container.remove(force=True, v=True)
                raise no_gpus(request.image, exc) from None
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
            stop_ran_over(container, "a probe container")
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
