"""Adapter: `imagekit run`, the familiar `docker run` of a full image, made right.

Mounts the workspace, maps the ports, passes GPUs when the engine has them,
maps the host user, sets a shared-memory size NCCL accepts, waits until the
service answers, prints how to reach it, and removes the container however the run ends:
Ctrl-C, SIGTERM, a closed terminal (SIGHUP), or a start the engine refuses (a port taken,
no GPU runtime, an entrypoint that cannot run). A refused start is one line with a hint.
"""

from __future__ import annotations

import contextlib
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

from imagekit.adapters.engine import DockerEngine, engine_errors
from imagekit.adapters.engine_facts import container_limits, gpu_device_requests
from imagekit.adapters.orphans import owner
from imagekit.errors import EngineError, ExitCode, GpuUnavailableError, ImagekitError, InputError
from imagekit.kernel import labels as L
from imagekit.kernel.engine import EngineInfo
from imagekit.kernel.runtime import DEFAULT_SHM_BYTES
from imagekit.serve.decide import Service

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
    # docker's --user; None: the image's entrypoint chooses (the workspace's owner, root where
    # only root can write it) and says so in the log this run shows.
    user: str | None = None
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


def owner_of(folder: Path) -> tuple[int, int]:
    """(uid, gid) of `folder`."""
    found = folder.resolve().stat()
    return found.st_uid, found.st_gid


def default_public_key() -> Path | None:
    """The first of ~/.ssh/id_ed25519.pub, id_ecdsa.pub, id_rsa.pub that exists."""
    for name in ("id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub"):
        path = Path.home() / ".ssh" / name
        if path.is_file():
            return path
    return None


def ssh_keys(service: Service, given: Path | None) -> Path | None:
    """The public keys a service lets in: those given, else for sshd the first default one."""
    return given if given is not None or service is not Service.SSH else default_public_key()


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
def started(engine: DockerEngine, request: RunRequest) -> Iterator[Container]:
    """The started container of `request` (detached), removed when the block ends, however it
    ends: a start the engine refuses, an error, a stop signal at any point after the create.
    One owner from create to removal leaves no moment in which a signal could orphan it."""
    check(request)
    container = None
    try:
        with signals_held():
            container = _create(engine, request)
        _start(container, request)
        yield container
    finally:
        if container is not None:
            remove(container)


def check(request: RunRequest) -> None:
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


def _create(engine: DockerEngine, request: RunRequest) -> Container:
    """Create (not start) the container, labelled and named after the run."""
    port, host_port = request.ports
    environment = {}
    volumes = {str(request.workspace.resolve()): {"bind": "/workspace", "mode": "rw"}}
    if request.service is Service.JUPYTER:
        environment["JUPYTER_TOKEN"] = request.token
    if request.service is Service.SSH and request.authorized_keys is not None:
        volumes[str(request.authorized_keys.resolve())] = {
            "bind": "/etc/imagekit/authorized_keys",
            "mode": "ro",
        }
    device_requests = gpu_device_requests(request.engine) if request.gpus else []
    with engine_errors(f"creating a container of {request.image}"):
        try:
            return engine.client.containers.create(
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


def _listening(container: Container, port: int) -> bool:
    """Whether something in the container listens on TCP `port`, read from the kernel's
    table: connecting to sshd to find out makes it log a "Connection closed" line."""
    done = container.exec_run(["cat", "/proc/net/tcp", "/proc/net/tcp6"], user="0")
    table = done.output.decode("ascii", "replace") if isinstance(done.output, bytes) else ""
    return any(
        len(cols) > 3 and cols[1].endswith(f":{port:04X}") and cols[3] == "0A"
        for cols in (line.split() for line in table.splitlines())
    )


def _answers(container: Container, service: Service, ports: tuple[int, int]) -> bool:
    port, host_port = ports
    if service is Service.SSH:
        return _listening(container, port)
    path = "/api" if service is Service.JUPYTER else "/"
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{host_port}{path}", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_ready(container: Container, request: RunRequest, timeout_s: float = 120) -> None:
    """Wait until the service answers (sshd: listens). A container that exits first fails in
    one line (its log, shown from its start, says why)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        container.reload()
        if container.status in ("exited", "dead"):
            raise ServiceFailedError(
                f"the {request.service} container of {request.image} exited "
                f"(exit {container.attrs['State']['ExitCode']}) before {request.service} answered",
                "its log is above; `imagekit run IMAGE --shell` looks inside the image",
            )
        if _answers(container, request.service, request.ports):
            return
        time.sleep(0.5)
    raise ServiceFailedError(
        f"{request.service} did not answer on port {request.ports[1]} in {timeout_s:.0f}s"
    )


def how_to_reach(request: RunRequest, user_name: str) -> str:
    """The URL (with its token) or the ssh command for the started service, as it can be
    pasted: with `-i KEY` where the key let in is not one ssh offers by itself."""
    _, host_port = request.ports
    if request.service is Service.JUPYTER:
        return f"http://127.0.0.1:{host_port}/lab?token={request.token}"
    if request.service is Service.TENSORBOARD:
        return f"http://127.0.0.1:{host_port}/"
    command = f"ssh -p {host_port} {user_name}@127.0.0.1"
    keys = request.authorized_keys
    if keys is None or keys.resolve() == (default_public_key() or Path()).resolve():
        return command
    private = keys.with_suffix("") if keys.suffix == ".pub" else None
    if private is not None and private.is_file():
        return f"ssh -i {private} -p {host_port} {user_name}@127.0.0.1"
    return f"{command}  (with the private key of {keys})"


def remove(container: Container) -> None:
    """Stop and remove a container, whatever state it is in; a stop signal waits until it is
    gone."""
    with signals_held():
        with contextlib.suppress(docker.errors.APIError):
            container.stop(timeout=5)
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True, v=True)


def serve(
    engine: DockerEngine,
    request: RunRequest,
    on_ready: Callable[[str], None],
    on_log: Callable[[str], object],
) -> None:
    """Start the service and stream its log to `on_log` from its first line (the container's
    own notes on the user, the host key, TensorBoard's warning come before it answers); once it
    answers, hand `on_ready` how to reach it; return when the container stops. The container is
    removed however this ends (Ctrl-C included); a service that stops by itself is a
    ServiceFailedError."""
    with started(engine, request) as container:
        streaming = threading.Thread(
            target=_stream_log, args=(container, on_log), name="imagekit-run-log", daemon=True
        )
        streaming.start()
        try:
            wait_ready(container, request)
        except ServiceFailedError:
            streaming.join(timeout=5)  # the log of a container that exited ends by itself
            raise
        on_ready(how_to_reach(request, service_user(container)))
        while streaming.is_alive():
            streaming.join(timeout=0.5)  # short waits: a stop signal is handled at once
        container.reload()
        raise ServiceFailedError(
            f"the {request.service} container stopped "
            f"(exit {container.attrs['State']['ExitCode']})",
            "its log is above; `docker logs` is gone with the container",
        )


def _stream_log(container: Container, on_log: Callable[[str], object]) -> None:
    """Every line the container writes, from its start, until it stops (or is removed)."""
    with contextlib.suppress(docker.errors.APIError, OSError, ValueError):
        for chunk in container.logs(stream=True, follow=True):
            on_log(chunk.decode("utf-8", "replace"))


def service_user(container: Container) -> str:
    """The name the services run as, as the entrypoint wrote it down after choosing (root, the
    image's user renumbered to the workspace's owner, or the --user's name)."""
    done = container.exec_run(["cat", "/tmp/imagekit/user"], user="0")
    said = done.output.decode().strip() if isinstance(done.output, bytes) else ""
    return said if done.exit_code == 0 and said else "user"
