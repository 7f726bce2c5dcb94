"""`imagekit run`'s container, started and removed without an engine: whatever ends a run (a
stop signal, a start the engine refuses, a service that exits at once), nothing is left."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from imagekit.adapters import interactive, workstation
from imagekit.adapters.engine import DockerEngine
from imagekit.adapters.orphans import owner
from imagekit.adapters.workstation import RunRequest, ServiceFailedError
from imagekit.cli.signals import Stopped
from imagekit.errors import EngineError, ExitCode, GpuUnavailableError, ImagekitError
from imagekit.kernel import labels as L
from imagekit.kernel.vocabulary import EngineName, GpuMechanism, ImageStore
from imagekit.serve.decide import Service

# What Docker 20.10 answers when a start is refused, as the engine words it.
NO_GPU = 'could not select device driver "" with capabilities: [[gpu]]'
PORT_BOUND = (
    "driver failed programming external connectivity on endpoint imagekit-run-1 (63c6): "
    "Error starting userland proxy: listen tcp4 127.0.0.1:18890: bind: address already in use"
)
PORT_ALLOCATED = (
    "driver failed programming external connectivity on endpoint imagekit-run-1 (63c6): "
    "Bind for 127.0.0.1:18890 failed: port is already allocated"
)
NO_JUPYTER = (
    "failed to create shim task: OCI runtime create failed: runc create failed: unable to start "
    'container process: exec: "jupyter": executable file not found in $PATH: unknown'
)
NVIDIA_HOOK = (
    "failed to create shim task: OCI runtime create failed: runc create failed: unable to start "
    "container process: error during container init: error running hook #0: "
    "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown"
)


def refused(explanation: str) -> docker.errors.APIError:
    return docker.errors.APIError("500 Server Error", explanation=explanation)


@dataclass
class FakeContainer:
    """A container of FakeClient; `on_start` / `on_stop` stand in for what the engine does."""

    client: FakeClient
    labels: dict[str, str]
    on_start: Callable[[], None] = lambda: None
    on_stop: Callable[[], None] = lambda: None
    status: str = "created"
    exit_code: int = 0
    log: bytes = b""
    calls: list[str] = field(default_factory=list)

    @property
    def attrs(self) -> dict[str, Any]:
        return {"State": {"ExitCode": self.exit_code}}

    def start(self) -> None:
        self.calls.append("start")
        self.on_start()
        self.status = "running"

    def stop(self, timeout: int) -> None:
        self.calls.append("stop")
        self.on_stop()

    def remove(self, force: bool, v: bool) -> None:
        self.calls.append("remove")
        self.client.made.remove(self)

    def reload(self) -> None:
        pass

    def logs(self, tail: int) -> bytes:
        return self.log


@dataclass
class FakeClient:
    """`client.containers.create` of the Docker SDK, keeping what it made until removed."""

    on_create: Callable[[], None] = lambda: None
    made: list[FakeContainer] = field(default_factory=list)
    last: FakeContainer | None = None

    @property
    def containers(self) -> FakeClient:
        return self

    def create(self, image: str, command: list[str], **kwargs: Any) -> FakeContainer:
        self.kwargs = kwargs
        self.last = FakeContainer(self, kwargs["labels"])
        self.made.append(self.last)  # the engine has made it, whether or not we hear back
        self.on_create()
        return self.last


@pytest.fixture
def request_(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunRequest:
    monkeypatch.setattr(workstation, "port_free", lambda port: True)
    return RunRequest(image="local/full:1", service=Service.JUPYTER, workspace=tmp_path, gpus=False)


@pytest.fixture
def stop_handler() -> Iterator[None]:
    """SIGTERM handled as `imagekit.cli.signals` does: raised as Stopped in the main thread.
    Another thread runs meanwhile, as in a process with threads: the kernel may hand it the
    signal, and holding must not depend on which thread takes it."""

    def stop(signum: int, frame: object) -> None:
        raise Stopped(signum)

    previous = signal.signal(signal.SIGTERM, stop)
    done = threading.Event()
    other = threading.Thread(target=done.wait)
    other.start()
    yield
    done.set()
    other.join()
    signal.signal(signal.SIGTERM, previous)


def sigterm_now() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def start(client: FakeClient, request: RunRequest) -> None:
    """Start the container of `request` through `started`, whose block ends at once."""
    with workstation.started(DockerEngine(client), request):  # type: ignore[arg-type]
        pass


def test_the_container_is_named_labelled_and_removed_when_the_block_ends(
    request_: RunRequest,
) -> None:
    client = FakeClient()
    with workstation.started(DockerEngine(client), request_) as container:  # type: ignore[arg-type]
        # The owner lets the next run remove it should this process die with the engine.
        assert container.labels == {
            L.RUN_ID: request_.run_id,
            L.SERVICE: "jupyter",
            L.OWNER: owner(),
        }
        assert container.status == "running"
    assert request_.container_name == f"imagekit-{request_.run_id}"
    assert client.last is not None and client.last.calls == ["start", "stop", "remove"]
    assert client.made == []


@pytest.mark.usefixtures("stop_handler")
def test_a_stop_signal_while_the_engine_creates_the_container_waits_to_remove_it(
    request_: RunRequest,
) -> None:
    # Unheld, the signal would end create() before it returned the container: left in Created.
    client = FakeClient(on_create=sigterm_now)
    with pytest.raises(Stopped) as caught:
        start(client, request_)
    assert caught.value.exit_code == 143
    assert client.made == []
    assert client.last is not None and "start" not in client.last.calls


@pytest.mark.usefixtures("stop_handler")
def test_a_stop_signal_while_the_container_starts_removes_it(request_: RunRequest) -> None:
    client = FakeClient()
    client.on_create = lambda: setattr(client.last, "on_start", sigterm_now)
    with pytest.raises(Stopped):
        start(client, request_)
    assert client.made == []


@pytest.mark.usefixtures("stop_handler")
def test_a_stop_signal_while_it_serves_removes_it(request_: RunRequest) -> None:
    client = FakeClient()
    with pytest.raises(Stopped), workstation.started(DockerEngine(client), request_):  # type: ignore[arg-type]
        sigterm_now()
    assert client.made == []


@pytest.mark.usefixtures("stop_handler")
def test_a_stop_signal_while_the_container_is_stopped_still_lets_it_be_removed() -> None:
    client = FakeClient()
    container = FakeContainer(client, {}, on_stop=sigterm_now)
    client.made.append(container)
    with pytest.raises(Stopped):
        workstation.remove(container)  # type: ignore[arg-type]
    assert container.calls == ["stop", "remove"] and client.made == []


@pytest.mark.parametrize(
    "gpus,said,kind,code,message,hint",
    [
        (True, NO_GPU, GpuUnavailableError, 3, "has no GPU runtime", "NVIDIA Container Toolkit"),
        (True, NVIDIA_HOOK, GpuUnavailableError, 3, "driver not loaded", "nvidia-smi"),
        (False, PORT_BOUND, EngineError, 3, "port 18888 is already in use", "--port OTHER:8888"),
        (False, PORT_ALLOCATED, EngineError, 3, "port 18888 is already in use", "OTHER:8888"),
        (False, NO_JUPYTER, ServiceFailedError, 5, 'start jupyter: "jupyter": exec', "full image"),
        (False, "no space left on device", EngineError, 3, "no space left", "free space"),
    ],
    ids=["no GPU runtime", "GPU driver", "port bound", "port allocated", "no service", "other"],
)
def test_a_start_the_engine_refuses_is_one_line_with_a_hint_and_leaves_no_container(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    gpus: bool,
    said: str,
    kind: type[ImagekitError],
    code: int,
    message: str,
    hint: str,
) -> None:
    monkeypatch.setattr(workstation, "port_free", lambda port: True)
    request = RunRequest(
        image="local/full:1",
        service="jupyter",
        workspace=tmp_path,
        gpus=gpus,
        host_ports={8888: 18888},
    )

    def refuse() -> None:
        raise refused(said)

    client = FakeClient()
    client.on_create = lambda: setattr(client.last, "on_start", refuse)
    with pytest.raises(kind) as caught:
        start(client, request)
    error = caught.value
    assert error.exit_code == code
    assert message in error.message and "\n" not in error.message
    assert hint in error.hint
    assert client.made == []


def test_a_gpu_refusal_at_create_is_the_same_line(request_: RunRequest) -> None:
    # Engines that check device requests when the container is created, not started.
    def refuse() -> None:
        raise refused(NO_GPU)

    with pytest.raises(GpuUnavailableError) as caught:
        start(FakeClient(on_create=refuse), replace(request_, gpus=True))
    assert caught.value.exit_code is ExitCode.ENGINE_UNAVAILABLE


def test_a_gpu_refusal_without_gpus_asked_for_is_not_blamed_on_gpus(
    request_: RunRequest,
) -> None:
    assert workstation.start_refused(request_, NVIDIA_HOOK) is None


def test_a_service_that_exits_at_once_fails_in_one_line(request_: RunRequest) -> None:
    container = FakeContainer(FakeClient(), {}, status="exited", exit_code=3, log=b"no jupyter\n")
    with pytest.raises(ServiceFailedError) as caught:
        workstation.wait_ready(container, request_)  # type: ignore[arg-type]
    assert caught.value.message == (
        "the jupyter container of local/full:1 exited (exit 3) before jupyter answered"
    )
    assert "above" in caught.value.hint


def test_serve_streams_the_log_from_the_first_line_and_a_stop_ends_it(
    request_: RunRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container's own notes (whom it runs as, the host key, TensorBoard's warning) come
    before the service answers: they are shown, then how to reach it."""
    client = FakeClient()
    seen: list[str] = []
    monkeypatch.setattr(workstation, "_answers", lambda *args: True)
    monkeypatch.setattr(workstation, "service_user", lambda container: "ml")
    lines = [b"imagekit: running as root: /workspace belongs to root\n", b"later\n"]

    def logs(**kwargs: Any) -> Iterator[bytes]:
        assert kwargs == {"stream": True, "follow": True}  # from the start: no `since`
        yield from lines

    monkeypatch.setattr(FakeContainer, "logs", lambda self, **kw: logs(**kw), raising=False)
    with pytest.raises(ServiceFailedError):  # the log ended: the container stopped
        workstation.serve(DockerEngine(client), request_, seen.append, seen.append)  # type: ignore[arg-type]
    assert seen[0].startswith("imagekit: running as root")
    assert any(s.startswith("http://127.0.0.1:8888/lab?token=") for s in seen)
    assert client.made == []


def test_ssh_is_ready_when_it_listens_read_from_the_kernels_table_not_by_connecting() -> None:
    table = (
        "  sl  local_address rem_address   st tx_queue\n"
        "   0: 00000000:08AE 00000000:0000 0A 00000000:00000000\n"
    )

    class Listening:
        def exec_run(self, argv: list[str], user: str) -> Any:
            assert argv[0] == "cat" and "/proc/net/tcp" in argv
            return type("Done", (), {"output": table.encode(), "exit_code": 0})()

    assert workstation._listening(Listening(), 2222)  # type: ignore[arg-type]
    assert not workstation._listening(Listening(), 2223)  # type: ignore[arg-type]


def test_the_printed_ssh_command_names_a_key_ssh_would_not_offer_by_itself(
    request_: RunRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workstation, "default_public_key", lambda: None)
    ssh = replace(request_, service=Service.SSH, host_ports={2222: 2022})
    private = tmp_path / "lab_key"
    private.write_text("k")
    (tmp_path / "lab_key.pub").write_text("ssh-ed25519 AAAA")
    keyed = replace(ssh, authorized_keys=tmp_path / "lab_key.pub")
    assert workstation.how_to_reach(keyed, "ml") == f"ssh -i {private} -p 2022 ml@127.0.0.1"
    (tmp_path / "other.pub").write_text("ssh-ed25519 AAAA")
    alone = replace(ssh, authorized_keys=tmp_path / "other.pub")
    assert "(with the private key of" in workstation.how_to_reach(alone, "ml")
    monkeypatch.setattr(workstation, "default_public_key", lambda: tmp_path / "lab_key.pub")
    assert workstation.how_to_reach(keyed, "root") == "ssh -p 2022 root@127.0.0.1"


# Whose files: the container is the workspace owner's, root where only root can write it -----


def test_services_start_without_user_so_the_entrypoint_becomes_the_workspace_owner(
    request_: RunRequest,
) -> None:
    client = FakeClient()
    with workstation.started(DockerEngine(client), request_):  # type: ignore[arg-type]
        pass
    assert client.kwargs["user"] == ""
    assert "IMAGEKIT_ALLOW_ROOT" not in client.kwargs["environment"]


ROOT, HOST = (0, 0), (4321, 4321)


@pytest.mark.parametrize(
    "given,entrypoint,rootless,me,owner,user",
    [
        ("0:0", True, False, ROOT, ROOT, "0:0"),  # --user exactly as given, 0:0 included
        ("7:7", False, True, HOST, HOST, "7:7"),
        (None, True, False, ROOT, ROOT, None),  # full: its entrypoint decides, as under docker
        (None, True, True, HOST, HOST, None),
        (None, False, False, ROOT, ROOT, "0:0"),  # slim, a root host user's own folder
        (None, False, False, ROOT, HOST, "4321:4321"),  # root on a user's folder: that user
        (None, False, False, HOST, HOST, "4321:4321"),  # a non-root host user
        (None, False, True, HOST, HOST, "0:0"),  # rootless: the container's root is the user
    ],
)
def test_a_command_runs_as_the_workspace_owner_the_way_full_images_decide(
    given: str | None,
    entrypoint: bool,
    rootless: bool,
    me: tuple[int, int],
    owner: tuple[int, int],
    user: str | None,
) -> None:
    from imagekit.serve.decide import command_user

    chosen = command_user(given, entrypoint=entrypoint, rootless=rootless, me=me, owner=owner)
    assert chosen == user


def test_an_interactive_run_asks_for_the_gpus_the_way_the_engine_hands_them_over(
    tmp_path: Path,
) -> None:
    argv = interactive.docker_run_argv("docker", "img:1", ["shell"], tmp_path, True, False)
    assert argv[argv.index("--gpus") + 1] == "all"
    assert "--user" not in argv  # none decided: the image decides
    cdi = interactive.docker_run_argv(
        "docker",
        "img:1",
        ["shell"],
        tmp_path,
        True,
        False,
        gpu_mechanism=GpuMechanism.CDI,
        user="0:0",
    )
    assert "--gpus" not in cdi and cdi[cdi.index("--device") + 1] == "nvidia.com/gpu=all"
    assert cdi[cdi.index("--user") + 1] == "0:0"


def test_the_podman_engine_gives_service_containers_explicit_limits(tmp_path: Path) -> None:
    from imagekit.kernel.engine import EngineInfo

    made: dict[str, Any] = {}

    class Containers:
        def create(self, image: str, command: list[str], **kwargs: Any) -> object:
            made.update(kwargs)
            return object()

    client = type("Client", (), {"containers": Containers()})()
    podman = EngineInfo(name=EngineName.PODMAN, image_store=ImageStore.PODMAN)
    request = RunRequest("img:1", "jupyter", tmp_path, False, {8888: 18888}, engine=podman)
    workstation._create(DockerEngine(client), request)  # type: ignore[arg-type]
    assert {u["Name"] for u in made["ulimits"]} >= {"nofile"}
    made.clear()
    workstation._create(DockerEngine(client), replace(request, engine=EngineInfo()))  # type: ignore[arg-type]
    assert "ulimits" not in made
