"""The full flavour as a workstation, against real containers of the CPU demo full image."""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container

from tests.integration.conftest import ROOT, TEST_LABELS, DemoBuild, imagekit

FULL = "2.13.0-cpu-py3.11-full"
SLIM = "2.13.0-cpu-py3.11-slim"
ARTIFACTS = ROOT / "results" / "test-artifacts"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def full_image(demo_build: DemoBuild) -> str:
    return demo_build.records[FULL]["build"]["image_id"]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "workspace"
    folder.mkdir()
    os.chown(folder, 1000, 100)  # the image's default user, as a host user's folder would be
    return folder


@pytest.fixture
def start(engine: docker.DockerClient) -> Iterator:
    started: list[Container] = []

    def run(image: str, command: list[str], port: int | None = None, **kwargs: object) -> Container:
        ports = dict(kwargs.pop("ports", {}))  # type: ignore[call-overload]
        if port:
            ports[f"{port}/tcp"] = ("127.0.0.1", kwargs.pop("host_port"))
        container = engine.containers.run(
            image,
            command,
            detach=True,
            ports=ports,
            labels=TEST_LABELS,
            **kwargs,
        )
        started.append(container)
        return container

    yield run
    for container in started:
        container.remove(force=True)


def wait_http(url: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"{url} never answered")


def http(url: str, token: str | None = None, method: str = "GET", body: bytes | None = None):
    request = urllib.request.Request(url, method=method, data=body)
    if token:
        request.add_header("Authorization", f"token {token}")

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.fixture
def jupyter(full_image: str, start, workspace: Path) -> Iterator[tuple[str, str, Container]]:
    token = secrets.token_hex(16)
    port = free_port()
    (workspace / "hello.txt").write_text("hi")
    container = start(
        full_image,
        [],
        port=8888,
        host_port=port,
        environment={"JUPYTER_TOKEN": token},
        volumes={str(workspace): {"bind": "/workspace", "mode": "rw"}},
    )
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/api")
    yield base, token, container


def test_jupyter_refuses_requests_without_the_token(jupyter) -> None:
    base, _, _ = jupyter
    status, _, _ = http(f"{base}/api/contents")
    assert status == 403
    status, headers, _ = http(f"{base}/lab")
    assert status == 302 and "/login" in headers["Location"]


def test_jupyter_with_the_token_lists_the_workspace(jupyter) -> None:
    base, token, _ = jupyter
    status, _, body = http(f"{base}/api/contents", token)
    assert status == 200
    assert "hello.txt" in [item["name"] for item in json.loads(body)["content"]]


def test_jupyterlab_asks_nothing_about_news_at_its_first_start(jupyter) -> None:
    """The image answers JupyterLab's first-start question (fetch news from the internet?)
    with "never", read back through JupyterLab's own settings API."""
    base, token, _ = jupyter
    plugin = "@jupyterlab/apputils-extension:notification"
    status, _, body = http(f"{base}/lab/api/settings/{plugin}", token)
    assert status == 200, body
    defaults = json.loads(body)["schema"]["properties"]  # the image's overrides are defaults
    assert defaults["fetchNews"]["default"] == "false"
    assert defaults["checkForUpdates"]["default"] is False


def test_a_kernel_runs_torch_backward_and_the_output_is_read_back(jupyter) -> None:
    import websocket

    base, token, _ = jupyter
    status, _, body = http(f"{base}/api/kernels", token, "POST", b"{}")
    assert status == 201
    kernel = json.loads(body)["id"]
    ws = websocket.create_connection(
        f"{base.replace('http', 'ws')}/api/kernels/{kernel}/channels?token={token}", timeout=60
    )
    msg_id = uuid.uuid4().hex
    code = (
        "import torch\n"
        "x = torch.tensor(2.0, requires_grad=True)\n"
        "y = 3 * x + 1\n"
        "y.backward()\n"
        "print('grad', x.grad.item())\n"
    )
    ws.send(
        json.dumps(
            {
                "header": {
                    "msg_id": msg_id,
                    "username": "test",
                    "session": uuid.uuid4().hex,
                    "msg_type": "execute_request",
                    "version": "5.3",
                },
                "parent_header": {},
                "metadata": {},
                "channel": "shell",
                "content": {
                    "code": code,
                    "silent": False,
                    "store_history": False,
                    "user_expressions": {},
                    "allow_stdin": False,
                },
            }
        )
    )
    output = ""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        message = json.loads(ws.recv())
        if message.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind = message["header"]["msg_type"]
        if kind == "stream":
            output += message["content"]["text"]
        if kind == "error":
            pytest.fail("\n".join(message["content"]["traceback"]))
        if kind == "status" and message["content"]["execution_state"] == "idle" and output:
            break
    ws.close()
    assert output.strip() == "grad 3.0"


def test_a_real_browser_renders_the_jupyterlab_launcher(jupyter, tmp_path: Path) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("chromium is not installed; run `make browser` (make test does)")
    base, token, _ = jupyter
    flags = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1280,900",
        "--virtual-time-budget=30000",
    ]
    url = f"{base}/lab?token={token}"
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=180)
    assert "jp-Launcher" in dom.stdout, dom.stderr[-2000:]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "jupyterlab-launcher.png"
    subprocess.run([*flags, f"--screenshot={shot}", url], capture_output=True, timeout=180)
    assert shot.is_file() and shot.stat().st_size > 10_000


def test_the_healthcheck_reports_jupyter_healthy(jupyter) -> None:
    _, _, container = jupyter
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        container.reload()
        health = container.attrs["State"].get("Health", {})
        if health.get("Status") == "healthy":
            assert "healthy: jupyter" in health["Log"][-1]["Output"]
            return
        time.sleep(2)
    pytest.fail(f"never healthy: {container.attrs['State'].get('Health')}")


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("ssh")
    key = folder / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key, (folder / "id_ed25519.pub").read_text().strip()


def ssh(key: Path, port: int, user: str, *command: str, extra: tuple[str, ...] = ()):
    return subprocess.run(
        [
            "ssh",
            "-p",
            str(port),
            "-i",
            str(key),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            *extra,
            f"{user}@127.0.0.1",
            *command,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def wait_ssh(port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                if sock.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"no SSH banner on {port}")


@pytest.fixture
def sshd(full_image: str, start, keypair) -> tuple[int, Container]:
    _, public = keypair
    port = free_port()
    container = start(
        full_image, ["ssh"], port=2222, host_port=port, environment={"SSH_AUTHORIZED_KEYS": public}
    )
    wait_ssh(port)
    return port, container


SSHD_DIR = "/run/imagekit/ssh"  # the image user's private folder for sshd's keys


def test_sshd_runs_with_the_hardened_settings(sshd) -> None:
    _, container = sshd
    result = container.exec_run(["/usr/sbin/sshd", "-T", "-f", f"{SSHD_DIR}/sshd_config"])
    settings = result.output.decode().lower()
    for line in (
        "passwordauthentication no",
        "kbdinteractiveauthentication no",
        "permitrootlogin no",
        "allowtcpforwarding no",
        "x11forwarding no",
        "pubkeyauthentication yes",
        "strictmodes yes",
        f"authorizedkeysfile {SSHD_DIR}/authorized_keys",
    ):
        assert line in settings


def test_sshd_keeps_its_keys_out_of_tmp_in_a_folder_only_the_user_can_write(sshd) -> None:
    _, container = sshd
    out = container.exec_run(
        [
            "stat",
            "-c",
            "%n %U %a",
            "/",
            "/run",
            "/run/imagekit",
            SSHD_DIR,
            f"{SSHD_DIR}/authorized_keys",
        ]
    ).output.decode()
    modes = {
        name: (owner, mode) for name, owner, mode in (line.split() for line in out.splitlines())
    }
    assert modes[SSHD_DIR] == ("ml", "700")
    assert modes[f"{SSHD_DIR}/authorized_keys"] == ("ml", "600")
    for folder in ("/", "/run", "/run/imagekit"):
        owner, mode = modes[folder]
        assert owner == "root" and int(mode, 8) & 0o022 == 0, (folder, owner, mode)
    assert "authorized_keys" not in container.exec_run(["find", "/tmp"]).output.decode()


def test_strict_modes_refuse_a_key_file_others_may_write(sshd, keypair) -> None:
    port, container = sshd
    key, _ = keypair
    assert container.exec_run(["chmod", "0602", f"{SSHD_DIR}/authorized_keys"]).exit_code == 0
    refused = ssh(key, port, "ml", "true")
    assert refused.returncode != 0 and "Permission denied" in refused.stderr
    assert "bad ownership or modes" in container.logs().decode()
    assert container.exec_run(["chmod", "0600", f"{SSHD_DIR}/authorized_keys"]).exit_code == 0
    assert ssh(key, port, "ml", "true").returncode == 0


def test_a_key_login_as_the_default_user_runs_torch(sshd, keypair) -> None:
    port, _ = sshd
    key, _ = keypair
    result = ssh(key, port, "ml", "python", "-c", "'import torch; print(torch.__version__)'")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2.13.0+cpu"


def test_a_key_login_as_an_arbitrary_user_runs_torch_with_strict_modes(
    full_image: str, start, keypair
) -> None:
    key, public = keypair
    port = free_port()
    container = start(
        full_image,
        ["ssh"],
        port=2222,
        host_port=port,
        user="1010:100",
        environment={"SSH_AUTHORIZED_KEYS": public},
    )
    wait_ssh(port)
    command = (
        'id -u; echo "$HOME"; touch "$HOME/x" && python -c "import torch; print(torch.__version__)"'
    )
    result = ssh(key, port, "user", command)
    assert result.returncode == 0, result.stderr + container.logs().decode()
    uid, home, version = result.stdout.split()
    assert (uid, version) == ("1010", "2.13.0+cpu")
    assert home == "/tmp/home-1010"  # a home of its own: /home/ml belongs to uid 1000
    settings = container.exec_run(
        ["/usr/sbin/sshd", "-T", "-f", f"{home}/.imagekit-sshd/sshd_config"], user="1010:100"
    ).output.decode()
    assert "strictmodes yes" in settings.lower()


def test_password_and_root_logins_are_refused(sshd, keypair) -> None:
    port, _ = sshd
    key, _ = keypair
    password = ssh(
        key,
        port,
        "ml",
        "true",
        extra=(
            "-o",
            "PubkeyAuthentication=no",
            "-o",
            "PreferredAuthentications=password,keyboard-interactive",
        ),
    )
    assert password.returncode != 0 and "Permission denied" in password.stderr
    root = ssh(key, port, "root", "true")
    assert root.returncode != 0 and "Permission denied" in root.stderr


def test_two_containers_of_one_image_have_different_host_keys(
    full_image: str, start, keypair
) -> None:
    _, public = keypair
    prints = []
    for _ in range(2):
        port = free_port()
        start(
            full_image,
            ["ssh"],
            port=2222,
            host_port=port,
            environment={"SSH_AUTHORIZED_KEYS": public},
        )
        wait_ssh(port)
        scan = subprocess.run(
            ["ssh-keyscan", "-p", str(port), "-t", "ed25519", "127.0.0.1"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        prints.append(scan.stdout.split()[-1])
    assert prints[0] != prints[1]


def test_the_image_itself_holds_no_host_key(full_image: str, engine: docker.DockerClient) -> None:
    out = engine.containers.run(full_image, ["ls", "/etc/ssh"], entrypoint=[], remove=True)
    assert "ssh_host_" not in out.decode()


# What `grep` finds in a private key file. Binaries that merely mention the marker (sshd,
# ssh-keygen, libgnutls) are not key files: the scans skip binary files, as `grep -I` does.
PRIVATE_KEY = re.compile(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----")


def test_the_full_image_holds_no_private_key_file(
    full_image: str, engine: docker.DockerClient
) -> None:
    scan = (
        "find / -xdev -type f -print0"  # / without /proc, /sys, /dev (other filesystems)
        " | xargs -0 grep -lIE -- '-----BEGIN [A-Z ]*PRIVATE KEY-----'; echo scanned"
    )
    out = engine.containers.run(
        full_image, ["bash", "-c", scan], entrypoint=[], user="0:0", remove=True
    ).decode()
    assert out.splitlines() == ["scanned"], out  # tornado's test.key was one
    binaries = engine.containers.run(
        full_image,
        ["bash", "-c", "grep -lE -- '-----BEGIN [A-Z ]*PRIVATE KEY-----' /usr/sbin/sshd || true"],
        entrypoint=[],
        remove=True,
    ).decode()
    assert binaries.strip() == "/usr/sbin/sshd"  # the scan would see a key, were there one


class _Chunks(io.RawIOBase):
    """The chunks of `docker save` as a stream tarfile can read."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = iter(chunks)
        self._rest = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def, override]
        while not self._rest:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._rest = chunk
        size = min(len(buffer), len(self._rest))
        buffer[:size] = self._rest[:size]
        self._rest = self._rest[size:]
        return size


def test_no_layer_of_the_full_image_carries_a_private_key(
    full_image: str, engine: docker.DockerClient
) -> None:
    """Every file of every layer, those a later layer deletes included: a key removed in a
    later RUN than the one that installed it would still ship in the earlier layer."""
    found, layers, files = [], 0, 0
    saved = io.BufferedReader(_Chunks(engine.images.get(full_image).save(chunk_size=4 << 20)))
    with tarfile.open(fileobj=saved, mode="r|") as archive:
        for member in archive:
            if not member.isfile() or not (
                member.name.endswith("layer.tar") or member.name.startswith("blobs/")
            ):
                continue
            try:
                with tarfile.open(fileobj=archive.extractfile(member), mode="r|*") as layer:
                    layers += 1
                    for entry in layer:
                        if not entry.isfile():
                            continue
                        files += 1
                        content = layer.extractfile(entry)
                        assert content is not None
                        head = content.read(8192)
                        if b"\0" not in head and PRIVATE_KEY.search(head + content.read()):
                            found.append(f"{member.name}: /{entry.name}")
            except tarfile.ReadError:
                continue  # an OCI blob that is not a layer (a config, a manifest)
    assert layers >= 5 and files > 10_000  # it did read the image
    assert found == []


def test_without_an_authorized_key_sshd_does_not_start_and_says_why(full_image: str, start) -> None:
    container = start(full_image, ["ssh"])
    assert container.wait(timeout=60)["StatusCode"] != 0
    assert "sshd NOT started: no authorized key" in container.logs().decode()


def test_in_services_mode_a_missing_ssh_key_stops_only_sshd(full_image: str, start) -> None:
    token = secrets.token_hex(16)
    port = free_port()
    container = start(
        full_image,
        ["services"],
        port=8888,
        host_port=port,
        environment={"IMAGEKIT_SERVICES": "jupyter,ssh", "JUPYTER_TOKEN": token},
    )
    wait_http(f"http://127.0.0.1:{port}/api")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # past the first healthchecks (every 10 s)
        container.reload()
        assert container.status == "running", container.logs().decode()[-3000:]
        status, _, _ = http(f"http://127.0.0.1:{port}/api/contents", token)
        assert status == 200
        health = container.attrs["State"].get("Health", {})
        if health.get("Status") == "healthy":
            assert "healthy: jupyter" in health["Log"][-1]["Output"]
            break
        time.sleep(2)
    else:
        pytest.fail(f"never healthy: {container.attrs['State'].get('Health')}")
    logs = container.logs().decode()
    assert "sshd NOT started: no authorized key" in logs
    assert "Server listening" not in logs


TENSORBOARD_WARNING = "WARNING: TensorBoard has NO authentication"


def test_tensorboard_answers_on_its_port_and_warns_that_it_has_no_authentication(
    full_image: str, start, workspace: Path
) -> None:
    port = free_port()
    container = start(
        full_image,
        ["tensorboard"],
        port=6006,
        host_port=port,
        volumes={str(workspace): {"bind": "/workspace", "mode": "rw"}},
    )
    wait_http(f"http://127.0.0.1:{port}/")
    status, _, body = http(f"http://127.0.0.1:{port}/")
    assert status == 200 and b"TensorBoard" in body
    logs = container.logs().decode()
    assert TENSORBOARD_WARNING in logs
    assert "-p 127.0.0.1:6006:6006" in logs and "TENSORBOARD_HOST=127.0.0.1" in logs


def test_tensorboard_kept_inside_the_container_is_reached_through_an_ssh_tunnel(
    full_image: str, start, keypair
) -> None:
    key, public = keypair
    ssh_port, tensorboard_port, tunnel_port = free_port(), free_port(), free_port()
    container = start(
        full_image,
        ["services"],
        ports={
            "2222/tcp": ("127.0.0.1", ssh_port),
            "6006/tcp": ("127.0.0.1", tensorboard_port),
        },
        environment={
            "IMAGEKIT_SERVICES": "ssh,tensorboard",
            "TENSORBOARD_HOST": "127.0.0.1",
            "IMAGEKIT_SSH_FORWARDING": "yes",
            "SSH_AUTHORIZED_KEYS": public,
        },
    )
    wait_ssh(ssh_port)
    answers = ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:6006/"]
    deadline = time.monotonic() + 90
    while container.exec_run(answers).exit_code != 0:
        assert time.monotonic() < deadline, container.logs().decode()[-3000:]
        time.sleep(1)
    with pytest.raises(OSError):  # published, but nothing listens on the container's interface
        urllib.request.urlopen(f"http://127.0.0.1:{tensorboard_port}/", timeout=5)
    tunnel = subprocess.Popen(
        [
            "ssh",
            "-N",
            "-p",
            str(ssh_port),
            "-i",
            str(key),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "ExitOnForwardFailure=yes",
            "-L",
            f"{tunnel_port}:127.0.0.1:6006",
            "ml@127.0.0.1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_http(f"http://127.0.0.1:{tunnel_port}/", timeout_s=30)
        status, _, body = http(f"http://127.0.0.1:{tunnel_port}/")
        assert status == 200 and b"TensorBoard" in body
    finally:
        tunnel.terminate()
        tunnel.wait(timeout=10)
    logs = container.logs().decode()
    assert TENSORBOARD_WARNING not in logs
    assert "TensorBoard listens on 127.0.0.1 inside the container only" in logs


def test_an_arbitrary_user_starts_and_writes_to_the_workspace(
    full_image: str, engine: docker.DockerClient, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chown(workspace, 1010, 100)
    out = engine.containers.run(
        full_image,
        [
            "bash",
            "-c",
            'whoami; echo data > /workspace/made-by-1010.txt; touch "$HOME/x" && echo home-ok',
        ],
        user="1010:100",
        remove=True,
        volumes={str(workspace): {"bind": "/workspace", "mode": "rw"}},
    ).decode()
    assert "I have no name" not in out
    assert out.split()[0] == "user" and "home-ok" in out
    made = workspace / "made-by-1010.txt"
    assert made.read_text() == "data\n"
    assert made.stat().st_uid == 1010


def test_slim_carries_no_services_and_exposes_no_ports(
    demo_build: DemoBuild, engine: docker.DockerClient
) -> None:
    slim = engine.images.get(demo_build.records[SLIM]["build"]["image_id"])
    full = engine.images.get(demo_build.records[FULL]["build"]["image_id"])
    assert not slim.attrs["Config"].get("ExposedPorts")
    assert set(full.attrs["Config"]["ExposedPorts"]) == {"8888/tcp", "6006/tcp", "2222/tcp"}
    assert slim.attrs["Config"].get("Healthcheck") is None
    out = engine.containers.run(
        slim.id, ["bash", "-c", "ls /opt/venv/bin; command -v sshd gcc || true"], remove=True
    ).decode()
    assert "jupyter" not in out and "tensorboard" not in out and "sshd" not in out


def test_the_full_image_how_to_publishes_ports_on_loopback_only() -> None:
    section = (ROOT / "docs" / "how-to" / "full-image.md").read_text()
    runs = [span for span in re.findall(r"`([^`]*)`", section) if span.startswith("docker run")]
    published = [re.findall(r" -p (\S+)", span) for span in runs]
    assert sum(map(len, published)) >= 4
    for span, ports in zip(runs, published, strict=True):
        assert all(port.startswith("127.0.0.1:") for port in ports), span
    assert "-p 0.0.0.0:8888:8888" in section  # how to expose on purpose


def test_imagekit_run_ssh_without_a_key_says_what_to_pass(
    demo_build: DemoBuild, tmp_path: Path
) -> None:
    reference = demo_build.records[FULL]["build"]["reference"]
    result = imagekit(
        "run", reference, "--ssh", "--workspace", str(tmp_path), env={"HOME": str(tmp_path)}
    )
    assert result.code == 2
    assert "--authorized-keys" in result.stderr
