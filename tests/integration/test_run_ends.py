"""`imagekit run` ends cleanly however it ends, against the real engine and the CPU demo images.

The real CLI runs in a child process, as a person runs it. It is stopped by Ctrl-C, SIGTERM or
a closed terminal while its JupyterLab serves; the engine refuses to start it (a port taken, no
GPU runtime, an image without the service); or a stop signal reaches it while the engine is
still creating its container. Each test checks the exit status, the message, and that no
container of that run is left in any state (`docker ps -a` by the run's labels).
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import termios
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container

from imagekit.kernel import labels as L
from tests.children import default_stop_signals
from tests.integration.conftest import ROOT, DemoBuild
from tests.integration.test_workstation import free_port

FULL = "2.13.0-cpu-py3.11-full"
SLIM = "2.13.0-cpu-py3.11-slim"
# The CLI names the run's container in its first line: "... in container imagekit-run-<hex>".
CONTAINER_LINE = re.compile(r"in container imagekit-(run-[0-9a-f]+)")


@pytest.fixture(scope="module")
def full(demo_build: DemoBuild) -> str:
    return str(demo_build.records[FULL]["build"]["reference"])


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A folder the service may read: run as root, imagekit runs the image's own user (1000)."""
    folder = tmp_path / "workspace"
    folder.mkdir()
    if os.getuid() == 0:
        os.chown(folder, 1000, 100)
    return folder


def run_argv(image: str, workspace: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "imagekit", "run", image, "--workspace", str(workspace), *options]


def start_jupyter_run(image: str, workspace: Path, port: int) -> subprocess.Popen[str]:
    """`imagekit run IMAGE --jupyter` as a person starts it from a terminal."""
    return subprocess.Popen(
        run_argv(image, workspace, "--jupyter", "--port", f"{port}:8888"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_stop_signals,
    )


def run_id_in(stderr: str) -> str:
    found = CONTAINER_LINE.search(stderr)
    assert found, f"no container named in: {stderr}"
    return found.group(1)


def left_of(engine: docker.DockerClient, run_id: str) -> list[Container]:
    """Every container of the run, in any state (Created and Exited included)."""
    labels = [f"{L.RUN_ID}={run_id}", L.SERVICE]
    return list(engine.containers.list(all=True, filters={"label": labels}))


def wait_for_url(process: subprocess.Popen[str], port: int) -> str:
    """The URL the CLI prints once JupyterLab answers (stdout's first line)."""
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    if not url and process.stderr is not None and process.wait(timeout=60) is not None:
        pytest.fail(f"imagekit run ended ({process.returncode}): {process.stderr.read()[-3000:]}")
    assert url.startswith(f"http://127.0.0.1:{port}/lab?token="), url
    return url


def answers_with_token(url: str) -> bool:
    """Whether JupyterLab lists the workspace for the token in the URL the CLI printed."""
    base, token = url.split("/lab?token=")
    request = urllib.request.Request(f"{base}/api/contents")
    request.add_header("Authorization", f"token {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        return bool(response.status == 200)


@pytest.mark.parametrize(
    "sig,code",
    [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)],
    ids=["ctrl-c", "sigterm", "sighup"],
)
def test_a_stop_signal_while_jupyter_serves_removes_the_container_and_exits_128_plus_it(
    full: str, engine: docker.DockerClient, workspace: Path, sig: signal.Signals, code: int
) -> None:
    port = free_port()
    process = start_jupyter_run(full, workspace, port)
    try:
        assert process.stderr is not None
        run_id = run_id_in(process.stderr.readline())
        url = wait_for_url(process, port)
        assert answers_with_token(url)
        assert [c.status for c in left_of(engine, run_id)] == ["running"]  # the filter finds it
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == code, stderr
    assert f"interrupted ({sig.name}); cleaned up" in stderr and "Traceback" not in stderr
    assert left_of(engine, run_id) == []


def controlling_terminal() -> None:
    """In the child: its stdin (a pty) becomes the terminal of its own session, so closing
    the pty hangs it up, as closing a terminal window does."""
    default_stop_signals()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def test_a_closed_terminal_removes_the_container_and_exits_129(
    full: str, engine: docker.DockerClient, workspace: Path
) -> None:
    # Messages go to the terminal, which is gone before "interrupted" can be written there.
    port = free_port()
    terminal, tty = pty.openpty()
    process = subprocess.Popen(
        run_argv(full, workspace, "--port", f"{port}:8888"),
        cwd=ROOT,
        stdin=tty,
        stdout=subprocess.PIPE,
        stderr=tty,
        text=True,
        start_new_session=True,
        preexec_fn=controlling_terminal,
    )
    os.close(tty)
    try:
        wait_for_url(process, port)
        said = read_until(terminal, CONTAINER_LINE)
        os.close(terminal)  # the terminal window is closed: SIGHUP
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 129
    assert left_of(engine, run_id_in(said)) == []


def read_until(terminal: int, pattern: re.Pattern[str], timeout_s: float = 10) -> str:
    """What the child wrote to its terminal, up to a match of `pattern`."""
    said = ""
    deadline = time.monotonic() + timeout_s
    while not pattern.search(said) and time.monotonic() < deadline:
        if select.select([terminal], [], [], 0.5)[0]:
            said += os.read(terminal, 4096).decode("utf-8", "replace")
    return said


@pytest.fixture
def taken_port(request: pytest.FixtureRequest) -> Iterator[int]:
    """A port a process holds: listening (imagekit sees it before asking the engine), or only
    bound (the engine finds out when it publishes the port)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        if request.param == "listening":
            sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize(
    "taken_port,code", [("listening", 2), ("bound", 3)], indirect=["taken_port"]
)
def test_a_port_in_use_is_one_line_with_a_hint_and_leaves_no_container(
    full: str, engine: docker.DockerClient, tmp_path: Path, taken_port: int, code: int
) -> None:
    done = subprocess.run(
        run_argv(full, tmp_path, "--port", f"{taken_port}:8888"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == code, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"port {taken_port} is already in use" in errors[0]
    assert "hint: pick another one: --port OTHER:8888" in done.stderr
    if code == 2:
        # Seen before the engine is asked: refused before "starting", no container named.
        assert "starting" not in done.stderr, done.stderr
        assert engine.containers.list(all=True, filters={"publish": str(taken_port)}) == []
    else:
        assert left_of(engine, run_id_in(done.stderr)) == []


def test_gpus_all_on_an_engine_without_a_gpu_runtime_says_so_and_leaves_no_container(
    full: str, engine: docker.DockerClient, tmp_path: Path
) -> None:
    if any("nvidia" in name for name in engine.info().get("Runtimes") or {}):
        pytest.skip("this engine has an NVIDIA runtime: --gpus all works here")
    done = subprocess.run(
        run_argv(full, tmp_path, "--gpus", "all", "--port", f"{free_port()}:8888"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "this Docker engine has no GPU runtime" in errors[0]
    assert "install the NVIDIA Container Toolkit" in done.stderr
    assert "run without --gpus" in done.stderr
    assert left_of(engine, run_id_in(done.stderr)) == []


def test_an_image_without_the_service_is_one_line_with_a_hint_and_leaves_no_container(
    demo_build: DemoBuild, engine: docker.DockerClient, tmp_path: Path
) -> None:
    slim = demo_build.records[SLIM]["build"]["reference"]
    done = subprocess.run(
        run_argv(slim, tmp_path, "--port", f"{free_port()}:8888"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 5, done.stderr
    assert f'error: {slim} cannot start jupyter: "jupyter": executable file not found' in (
        done.stderr
    )
    assert "hint: services run in a full image" in done.stderr
    assert left_of(engine, run_id_in(done.stderr)) == []


class SlowCreate:
    """A proxy to the engine's socket that holds back the engine's answer to a container create
    (the engine has made the container by then), so that a signal lands while the CLI waits."""

    def __init__(self, path: Path, engine_socket: str, hold_s: float) -> None:
        self.path, self.engine_socket, self.hold_s = path, engine_socket, hold_s
        self.create_sent = threading.Event()
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return  # closed: the test is over
            engine = socket.socket(socket.AF_UNIX)
            engine.connect(self.engine_socket)
            creating = threading.Event()  # per connection: its next answer is held back
            for source, target, asks in ((client, engine, True), (engine, client, False)):
                threading.Thread(
                    target=self._copy, args=(source, target, asks, creating), daemon=True
                ).start()

    def _copy(
        self, source: socket.socket, target: socket.socket, asks: bool, creating: threading.Event
    ) -> None:
        """Copy one direction of a connection (`asks`: the CLI's requests). A request starts a
        read (the SDK writes its headers at once and asks one thing at a time)."""
        try:
            while data := source.recv(65536):
                if asks and data.startswith(b"POST ") and b"/containers/create" in data[:200]:
                    creating.set()
                    self.create_sent.set()
                elif not asks and creating.is_set():
                    time.sleep(self.hold_s)
                    creating.clear()
                target.sendall(data)
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the other side went away


def test_a_stop_signal_while_the_engine_creates_the_container_leaves_none(
    full: str, engine: docker.DockerClient, tmp_path: Path
) -> None:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        pytest.skip("the proxy stands in front of a local engine socket")
    proxy = SlowCreate(tmp_path / "engine.sock", host.removeprefix("unix://"), hold_s=3)
    process = subprocess.Popen(
        run_argv(full, tmp_path, "--port", f"{free_port()}:8888"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "DOCKER_HOST": f"unix://{proxy.path}"},
        preexec_fn=default_stop_signals,
    )
    try:
        assert proxy.create_sent.wait(60), "the CLI never asked the engine to create"
        time.sleep(0.5)  # the engine has made it; the answer is held back
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        proxy.server.close()
    assert process.returncode == 143, stderr
    assert "interrupted (SIGTERM); cleaned up" in stderr
    assert left_of(engine, run_id_in(stderr)) == []
