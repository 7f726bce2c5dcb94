"""Adapter: `imagekit run`, the familiar `docker run` of a full image, made right.

Mounts the workspace, maps the ports, passes GPUs when the engine has them,
maps the host user, sets a shared-memory size NCCL accepts, waits until the
service answers, prints how to reach it, and removes the container however the run ends:
Ctrl-C, SIGTERM, a closed terminal (SIGHUP), or a start the engine refuses (a port taken,
no GPU runtime, an entrypoint that cannot run). A refused start is one line with a hint.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
import docker.types
from docker.models.containers import Container

from imagekit.adapters.engine import engine_errors
from imagekit.adapters.engine_facts import container_limits, gpu_device_requests
from imagekit.adapters.orphans import owner
from imagekit.core import labels as L
from imagekit.core.ports import EngineInfo
from imagekit.core.runtime import DEFAULT_SHM_BYTES, Service, root_serves
from imagekit.errors import EngineError, ExitCode, GpuUnavailableError, ImagekitError, InputError

NO_GPU_HINT = (
    "install the NVIDIA Container Toolkit on the host and restart the engine, "
    "or run without --gpus (or with --gpus none)"
)
SERVICE_PORTS = {Service.JUPYTER: 8888, Service.TENSORBOARD: 6006, Service.SSH: 2222}
# The signals that stop a run (imagekit.cli.signals raises each as a KeyboardInterrupt).
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
# What the engine says when `--gpus` asks for a device driver it does not have.
NO_GPU_DRIVER = "could not select device driver"
# What it says when the port to publish is taken: by a process (docker-proxy cannot listen)
# or by another container (the engine's own port allocator).
PORT_TAKEN = ("address already in use", "port is already allocated")
# runc could not exec the entrypoint or the service: `exec: "jupyter": executable file not
# found in $PATH`, `exec: "/x": stat /x: no such file or directory`, `permission denied`.
EXEC_FAILED = re.compile(r'exec: (".*?": .*?)(?:: unknown)?$')


class ServiceFailedError(ImagekitError):
    """The container exited, or its service never answered: the image does not work."""

    exit_code = ExitCode.PROBE_FAILED


@dataclass(frozen=True)
class RunRequest:
    """What to start."""

    image: str
    service: Service  # jupyter, ssh or tensorboard
    workspace: Path
    gpus: bool
    host_ports: dict[int, int] = field(default_factory=dict)  # container port -> host port
    user: str | None = None  # docker's --user; None: the image's entrypoint chooses
    # Root host user, root's workspace: Jupyter or TensorBoard run as root (IMAGEKIT_ALLOW_ROOT)
    # so that what they save belongs to that user; the CLI says so.
    allow_root: bool = False
    authorized_keys: Path | None = None
    token: str = field(default_factory=lambda: secrets.token_hex(24))
    # Labels the container (io.imagekit.run-id) and names it: `imagekit-<run id>`.
    run_id: str = field(default_factory=lambda: f"run-{secrets.token_hex(4)}")
    # The engine: how it hands over GPUs, which limits its containers need.
    engine: EngineInfo = field(default_factory=EngineInfo)

    @property
    def container_name(self) -> str:
        """The container's name, known before the engine is asked to create it."""
        return f"imagekit-{self.run_id}"

    @property
    def ports(self) -> tuple[int, int]:
        """(the service's port in the container, the host port it is published on)."""
        port = SERVICE_PORTS[self.service]
        return port, self.host_ports.get(port, port)


def host_user() -> str | None:
    """`uid:gid` of the person running imagekit, so /workspace files stay theirs; None
    for root (the image's own non-root user is used then)."""
    uid, gid = os.getuid(), os.getgid()
    return None if uid == 0 else f"{uid}:{gid}"


def root_must_serve(service: Service, workspace: Path, *, rootless: bool = False) -> bool:
    """Whether a service can save into `workspace` only as the container's root (see
    `why_root_serves`)."""
    return why_root_serves(service, workspace, rootless=rootless) is not None


def why_root_serves(service: Service, workspace: Path, *, rootless: bool = False) -> str | None:
    """Why a service can save into `workspace` only as the container's root, or None when it
    need not (`core.runtime.root_serves`, for this process and that folder's owner)."""
    owner = workspace.resolve().stat().st_uid
    return root_serves(service, str(workspace), owner, os.getuid(), rootless=rootless)


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


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold the stop signals while the engine creates or removes the container.

    A signal that cut the create request short would leave a container in `Created` whose id
    no one has; one that cut the removal short would leave it running. A signal that arrives
    meanwhile is raised again when the block ends, for the handler it was meant for, once the
    container is known (and removed by whoever holds it) or gone. Engine calls have the
    client's time limit, so the wait ends. Python runs handlers in the main thread only, so
    they are swapped there (masking the signals would not hold those another thread takes)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # no handler interrupts this thread
        return
    held: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, frame: held.append(signum))
        for sig in STOP_SIGNALS
        if signal.getsignal(sig) not in (signal.SIG_IGN, None)  # ignored ones stay ignored
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if held:
            signal.raise_signal(held[0])


def start_refused(request: RunRequest, reason: str) -> ImagekitError | None:
    """What it means that the engine would not create or start `request`'s container, in one
    line with a hint; None for a refusal not known here (`engine_errors` reports those)."""
    said = _first_line(reason)
    port, host_port = request.ports
    if request.gpus and NO_GPU_DRIVER in said:
        return GpuUnavailableError(
            f"this Docker engine has no GPU runtime, so it cannot give {request.image} GPUs "
            f"({said})",
            NO_GPU_HINT,
        )
    if request.gpus and "nvidia" in said.lower():
        return GpuUnavailableError(
            f"the engine's NVIDIA runtime could not give {request.image} GPUs: {said}",
            "check the host's driver (`nvidia-smi`), or run without --gpus",
        )
    if any(text in said for text in PORT_TAKEN):
        return EngineError(
            f"port {host_port} is already in use on this host: the engine cannot publish it",
            f"pick another one: --port OTHER:{port}",
        )
    if exec_failed := EXEC_FAILED.search(said):
        return ServiceFailedError(
            f"{request.image} cannot start {request.service}: {exec_failed.group(1)}",
            "services run in a full image; `imagekit run IMAGE --shell` opens a shell in any",
        )
    return None


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


@contextlib.contextmanager
def started(client: docker.DockerClient, request: RunRequest) -> Iterator[Container]:
    """The started container of `request` (detached), removed when the block ends, however it
    ends: a start the engine refuses, an error, a stop signal at any point after the create.
    One owner from create to removal leaves no moment in which a signal could orphan it."""
    _check(request)
    container = None
    try:
        with signals_held():
            container = _create(client, request)
        _start(container, request)
        yield container
    finally:
        if container is not None:
            remove(container)


def _check(request: RunRequest) -> None:
    """What can be found wrong before the engine is asked: a port taken, no key for sshd."""
    port, host_port = request.ports
    if not port_free(host_port):
        raise InputError(
            f"port {host_port} is already in use on this host",
            f"pick another one: --port OTHER:{port}",
        )
    if request.service is Service.SSH and request.authorized_keys is None:
        raise InputError(
            "--ssh needs a public key to let in",
            "pass --authorized-keys FILE (default: ~/.ssh/id_ed25519.pub if it exists)",
        )


def _create(client: docker.DockerClient, request: RunRequest) -> Container:
    """Create (not start) the container, labelled and named after the run."""
    port, host_port = request.ports
    environment = {}
    volumes = {str(request.workspace.resolve()): {"bind": "/workspace", "mode": "rw"}}
    if request.service is Service.JUPYTER:
        environment["JUPYTER_TOKEN"] = request.token
    if request.allow_root:
        environment["IMAGEKIT_ALLOW_ROOT"] = "1"
    if request.service is Service.SSH and request.authorized_keys is not None:
        volumes[str(request.authorized_keys.resolve())] = {
            "bind": "/etc/imagekit/authorized_keys",
            "mode": "ro",
        }
    device_requests = gpu_device_requests(request.engine) if request.gpus else []
    with engine_errors(f"creating a container of {request.image}"):
        try:
            return client.containers.create(
                request.image,
                [request.service],
                name=request.container_name,
                detach=True,
                user=request.user or "",
                environment=environment,
                volumes=volumes,
                ports={f"{port}/tcp": ("127.0.0.1", host_port)},
                shm_size=DEFAULT_SHM_BYTES,
                device_requests=device_requests,
                labels={L.RUN_ID: request.run_id, L.SERVICE: request.service, L.OWNER: owner()},
                **container_limits(request.engine),
            )
        except docker.errors.ImageNotFound:
            raise InputError(f"image {request.image} is not in the engine") from None
        except docker.errors.APIError as exc:
            raise start_refused(request, str(exc.explanation or exc)) or exc from None


def _start(container: Container, request: RunRequest) -> None:
    """Start the created container; a refusal the engine explains is one line with a hint."""
    with engine_errors(f"starting {request.image}"):
        try:
            container.start()
        except docker.errors.APIError as exc:
            raise start_refused(request, str(exc.explanation or exc)) or exc from None


def _answers(service: Service, port: int) -> bool:
    if service is Service.SSH:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                return sock.recv(4).startswith(b"SSH-")
        except OSError:
            return False
    path = "/api" if service is Service.JUPYTER else "/"
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_ready(
    container: Container,
    request: RunRequest,
    on_log: Callable[[str], None],
    timeout_s: float = 120,
) -> None:
    """Wait until the service answers on its host port. A container that exits first hands
    its last log lines to `on_log` and fails in one line (the log says why)."""
    _, host_port = request.ports
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        container.reload()
        if container.status in ("exited", "dead"):
            on_log(container.logs(tail=20).decode("utf-8", "replace"))
            raise ServiceFailedError(
                f"the {request.service} container of {request.image} exited "
                f"(exit {container.attrs['State']['ExitCode']}) before {request.service} answered",
                "its last lines are above; `imagekit run IMAGE --shell` looks inside the image",
            )
        if _answers(request.service, host_port):
            return
        time.sleep(0.5)
    raise ServiceFailedError(
        f"{request.service} did not answer on port {host_port} in {timeout_s:.0f}s"
    )


def how_to_reach(request: RunRequest, user_name: str) -> str:
    """The URL (with its token) or the ssh command for the started service."""
    _, host_port = request.ports
    if request.service is Service.JUPYTER:
        return f"http://127.0.0.1:{host_port}/lab?token={request.token}"
    if request.service is Service.TENSORBOARD:
        return f"http://127.0.0.1:{host_port}/"
    return f"ssh -p {host_port} {user_name}@127.0.0.1"


def remove(container: Container) -> None:
    """Stop and remove a container, whatever state it is in; a stop signal waits until it is
    gone."""
    with signals_held():
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
    with started(client, request) as container:
        wait_ready(container, request, on_log)
        on_ready(how_to_reach(request, service_user(container, request)))
        for chunk in container.logs(stream=True, follow=True, since=int(time.time())):
            on_log(chunk.decode("utf-8", "replace"))
        container.reload()
        raise ServiceFailedError(
            f"the {request.service} container stopped "
            f"(exit {container.attrs['State']['ExitCode']})",
            "its log is above; `docker logs` is gone with the container",
        )


def service_user(container: Container, request: RunRequest) -> str:
    """The name the service runs as: root where allowed, the --user's name, else the image's
    user, whom the entrypoint renumbered to the owner of /workspace."""
    if request.allow_root:
        return "root"
    if request.user:
        output = container.exec_run(["id", "-un"], user=request.user).output
        return output.decode().strip() if isinstance(output, bytes) and output else "user"
    env = dict(e.split("=", 1) for e in container.attrs["Config"].get("Env") or [] if "=" in e)
    return str(env.get("IMAGEKIT_USER", "user"))


def docker_run_argv(
    docker_cli: str,
    image: str,
    args: list[str],
    workspace: Path,
    gpus: bool,
    tty: bool,
    gpu_mechanism: str = "nvidia-runtime",
    user: str | None = None,
    rootless: bool = False,
) -> list[str]:
    """The `docker run` command line of an interactive shell or command in `image`: as
    `user`, else as the person running imagekit, so /workspace files stay theirs (on a rootless
    engine that person is the container's root)."""
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
    if (chosen := user or ("0:0" if rootless else host_user())) is not None:
        argv += ["--user", chosen]
    if gpus:
        argv += ["--device", "nvidia.com/gpu=all"] if gpu_mechanism == "cdi" else ["--gpus", "all"]
    return [*argv, image, *args]
