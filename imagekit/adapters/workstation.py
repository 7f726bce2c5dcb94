"""Adapter: `imagekit run`, the familiar `docker run` of a full image, made right.

Mounts the workspace, maps the ports, passes GPUs when the engine has them,
maps the host user, sets a shared-memory size NCCL accepts, waits until the
service answers, prints how to reach it, and removes the container on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
import docker.types
from docker.models.containers import Container

from imagekit.adapters.engine import engine_errors
from imagekit.core import labels as L
from imagekit.core.runtime import DEFAULT_SHM_BYTES
from imagekit.errors import ExitCode, GpuUnavailableError, ImagekitError, InputError

NO_GPU_HINT = (
    "this engine cannot hand GPUs to containers (no NVIDIA Container Toolkit): "
    "run with --gpus none, or install the toolkit"
)
SERVICE_PORTS = {"jupyter": 8888, "tensorboard": 6006, "ssh": 2222}


class ServiceFailedError(ImagekitError):
    """The container exited, or its service never answered: the image does not work."""

    exit_code = ExitCode.PROBE_FAILED


@dataclass(frozen=True)
class RunRequest:
    """What to start."""

    image: str
    service: str  # jupyter | ssh | tensorboard
    workspace: Path
    gpus: bool
    host_ports: dict[int, int] = field(default_factory=dict)  # container port -> host port
    user: str | None = None
    authorized_keys: Path | None = None
    token: str = field(default_factory=lambda: secrets.token_hex(24))


def host_user() -> str | None:
    """`uid:gid` of the person running imagekit, so /workspace files stay theirs; None
    for root (the image's own non-root user is used then)."""
    uid, gid = os.getuid(), os.getgid()
    return None if uid == 0 else f"{uid}:{gid}"


def default_public_key() -> Path | None:
    """The first of ~/.ssh/id_ed25519.pub, id_ecdsa.pub, id_rsa.pub that exists."""
    for name in ("id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub"):
        path = Path.home() / ".ssh" / name
        if path.is_file():
            return path
    return None


def port_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:`port`."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) != 0


def start(client: docker.DockerClient, request: RunRequest) -> Container:
    """Start the container of `request` (detached); the caller removes it."""
    port = SERVICE_PORTS[request.service]
    host_port = request.host_ports.get(port, port)
    if not port_free(host_port):
        raise InputError(
            f"port {host_port} is already in use on this host",
            f"pick another one: --port OTHER:{port}",
        )
    environment = {}
    volumes = {str(request.workspace.resolve()): {"bind": "/workspace", "mode": "rw"}}
    if request.service == "jupyter":
        environment["JUPYTER_TOKEN"] = request.token
    if request.service == "ssh":
        if request.authorized_keys is None:
            raise InputError(
                "--ssh needs a public key to let in",
                "pass --authorized-keys FILE (default: ~/.ssh/id_ed25519.pub if it exists)",
            )
        volumes[str(request.authorized_keys.resolve())] = {
            "bind": "/etc/imagekit/authorized_keys",
            "mode": "ro",
        }
    device_requests = (
        [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if request.gpus else []
    )
    with engine_errors(f"creating a container of {request.image}"):
        try:
            container = client.containers.create(
                request.image,
                [request.service],
                detach=True,
                user=request.user or "",
                environment=environment,
                volumes=volumes,
                ports={f"{port}/tcp": ("127.0.0.1", host_port)},
                shm_size=DEFAULT_SHM_BYTES,
                device_requests=device_requests,
                labels={
                    L.RUN_ID: f"run-{secrets.token_hex(4)}",
                    L.SERVICE: request.service,
                },
            )
        except docker.errors.ImageNotFound:
            raise InputError(f"image {request.image} is not in the engine") from None
    try:
        with engine_errors(f"starting {request.image}"):
            try:
                container.start()
            except docker.errors.APIError as exc:
                text = str(exc.explanation or exc)
                if request.gpus and ("device driver" in text or "nvidia" in text.lower()):
                    raise GpuUnavailableError(
                        f"no GPUs for {request.image}: {text}", NO_GPU_HINT
                    ) from None
                raise
    except BaseException:
        remove(container)  # a container that never started is no one's to clean up later
        raise
    return container


def _answers(service: str, port: int) -> bool:
    if service == "ssh":
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                return sock.recv(4).startswith(b"SSH-")
        except OSError:
            return False
    path = "/api" if service == "jupyter" else "/"
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_ready(container: Container, request: RunRequest, timeout_s: float = 120) -> None:
    """Wait until the service answers on its host port; fail if the container exits."""
    port = SERVICE_PORTS[request.service]
    host_port = request.host_ports.get(port, port)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        container.reload()
        if container.status in ("exited", "dead"):
            tail = container.logs(tail=20).decode("utf-8", "replace")
            raise ServiceFailedError(
                f"the container exited before {request.service} answered:\n{tail}"
            )
        if _answers(request.service, host_port):
            return
        time.sleep(0.5)
    raise ServiceFailedError(
        f"{request.service} did not answer on port {host_port} in {timeout_s:.0f}s"
    )


def how_to_reach(request: RunRequest, user_name: str) -> str:
    """The URL (with its token) or the ssh command for the started service."""
    port = SERVICE_PORTS[request.service]
    host_port = request.host_ports.get(port, port)
    if request.service == "jupyter":
        return f"http://127.0.0.1:{host_port}/lab?token={request.token}"
    if request.service == "tensorboard":
        return f"http://127.0.0.1:{host_port}/"
    return f"ssh -p {host_port} {user_name}@127.0.0.1"


def remove(container: Container) -> None:
    """Stop and remove a container, whatever state it is in."""
    with contextlib.suppress(docker.errors.APIError):
        container.stop(timeout=5)
    with contextlib.suppress(docker.errors.NotFound):
        container.remove(force=True, v=True)


def serve(
    client: docker.DockerClient,
    request: RunRequest,
    on_ready: Callable[[str], None],
    on_log: Callable[[str], None],
) -> None:
    """Start the service, wait until it answers, hand `on_ready` how to reach it, then stream
    its log to `on_log` until it stops. The container is removed however this ends (Ctrl-C
    included); a service that stops by itself is a ServiceFailedError."""
    container = start(client, request)
    try:
        wait_ready(container, request)
        output = container.exec_run(["id", "-un"]).output
        name = output.decode().strip() if isinstance(output, bytes) else ""
        on_ready(how_to_reach(request, name or "user"))
        for chunk in container.logs(stream=True, follow=True, since=int(time.time())):
            on_log(chunk.decode("utf-8", "replace"))
        container.reload()
        raise ServiceFailedError(
            f"the {request.service} container stopped "
            f"(exit {container.attrs['State']['ExitCode']})",
            "its log is above; `docker logs` is gone with the container",
        )
    finally:
        remove(container)


def docker_run_argv(
    docker_cli: str, image: str, args: list[str], workspace: Path, gpus: bool, tty: bool
) -> list[str]:
    """The `docker run` command line of an interactive shell or command in `image`."""
    argv = [
        docker_cli,
        "run",
        "--rm",
        "-i",
        "--shm-size",
        str(DEFAULT_SHM_BYTES),
        "-v",
        f"{workspace.resolve()}:/workspace",
        "--label",
        f"{L.RUN_ID}=run-cli",
    ]
    if tty:
        argv.append("-t")
    if (user := host_user()) is not None:
        argv += ["--user", user]
    if gpus:
        argv += ["--gpus", "all"]
    return [*argv, image, *args]
