"""Rootless Podman, as a non-root user of a GPU server runs it: a real host account (made by
the test, with the subordinate ids Debian's useradd gives it), its own imagekit install and its
own `podman system service` on a socket in its runtime folder. As that account, imagekit verifies
the demo's slim and serves JupyterLab from full with `imagekit run`: the notebook saved through
it belongs to the account. Both load the slim the main session built on the default engine
(`podman load`, as a user given an image archive would). On Podman 5.4 the account builds full
itself, FROM that slim: the steps a user namespace can break (apt's packages owned by other
users, pip run as the image's user, `COPY --chown`) are full's, and slim's builder stage is
proven rootful by the engine contract (a rootless slim build cost about two minutes on two cores
and showed nothing more). On Podman 4.3 it loads full too: the build on a rootless engine is
proven once, on the current Podman.

Twice: with the host's Podman 4.3 (`podman`), and with Podman 5.4 (`podman5`), which a Debian 12
host cannot take alone: the account's service then runs, as the account (the same uid, gid and
subordinate ids), in a box made from trixie (tests/integration/engines.py) that shares its home
and /tmp, so its files, socket and workspaces are the same paths inside and out. imagekit
itself runs on the host as the account, either way.

Rootless Podman needs uidmap (newuidmap) and slirp4netns (make test-engines installs them) and
a /dev/net/tun the account may open: udev makes it 0666 on a Debian install; a machine without
udev (these) has it 0600, so the test opens it up and puts it back.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from tests.integration.conftest import DemoBuild, matrix_text
from tests.integration.engines import (
    BOX_PODMAN,
    BOX_PODMAN_INCLUDE,
    box_image,
    free_port,
    podman5_conf,
    podman_box_options,
)
from tests.integration.test_fresh_setup import checkout_tar, host_env
from tests.integration.test_run_ends import answers_with_token, wait_for_url

# In the main session beside the default engine's tests (scripts/run-tests.sh): the other
# session, the engine contract's, is the longer one.
pytestmark = pytest.mark.integration

SLIM = "2.13.0-cpu-py3.11-slim"
FULL = "2.13.0-cpu-py3.11-full"
TUN = Path("/dev/net/tun")
# The kernel's own overlay, which user namespaces may mount (Linux 5.13+): without it Podman
# 4.3 falls back to vfs, a full copy of every layer.
STORAGE_CONF = """[storage]
driver = "overlay"
"""
SUBORDINATE_IDS = "200000-265535"


@dataclass
class Account:
    """A host account with its own imagekit and its own rootless Podman service."""

    name: str
    uid: int
    gid: int
    home: Path
    runtime: Path  # its XDG_RUNTIME_DIR
    imagekit: Path  # its imagekit command

    @property
    def socket(self) -> Path:
        return self.runtime / "podman.sock"

    def env(self) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            "USER": self.name,
            "LOGNAME": self.name,
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "XDG_RUNTIME_DIR": str(self.runtime),
            "DOCKER_HOST": f"unix://{self.socket}",
            "CI": "true",
            "LANG": "C.UTF-8",
        }

    def become(self) -> Callable[[], None]:
        """A `preexec_fn` that makes the child this account (groups, gid, uid), with the
        default disposition of the signals the tests send."""

        def child() -> None:
            os.setgroups([])
            os.setgid(self.gid)
            os.setuid(self.uid)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)

        return child

    def run(self, *argv: str, timeout_s: int = 1800) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), cwd=self.home, env=self.env(), preexec_fn=self.become(),
            capture_output=True, text=True, timeout=timeout_s, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip


def free_uid(start: int = 1600) -> int:
    uid = start
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
        uid += 1


@contextlib.contextmanager
def tun_open_to_all() -> Iterator[None]:
    mode = stat.S_IMODE(TUN.stat().st_mode)
    TUN.chmod(0o666)
    try:
        yield
    finally:
        TUN.chmod(mode)


class Service:
    """The account's rootless `podman system service`, on the host or in a Podman 5 box."""

    def __init__(self, me: Account, boxed: bool) -> None:
        self.me = me
        self.box = f"imagekit-it-{me.name}-podman5" if boxed else ""
        self.process: subprocess.Popen[bytes] | None = None

    def _as_account(self, *argv: str) -> list[str]:
        """`argv` as the account: on the host, or in the box (`docker exec` as its ids)."""
        if not self.box:
            return list(argv)
        env = [f"{k}={v}" for k, v in self.me.env().items() if k != "DOCKER_HOST"]
        exports = [x for pair in env for x in ("-e", pair)]
        conf = ("-e", f"CONTAINERS_CONF={self.me.home}/.config/containers/boxed.conf")
        user = f"{self.me.uid}:{self.me.gid}"
        return ["docker", "exec", "-u", user, *exports, *conf, self.box, *argv]

    def prepare(self) -> None:
        """The box (the account in it, with the same ids), when there is one."""
        if not self.box:
            return
        me = self.me
        image = box_image(BOX_PODMAN, BOX_PODMAN_INCLUDE)
        run = ["docker", "run", "-d", "--rm", "--name", self.box,
               *podman_box_options(me.home), image, "sleep", "infinity"]  # fmt: skip
        subprocess.run(run, check=True, capture_output=True, env=host_env())
        script = (
            f"groupadd --gid {me.gid} {me.name} && useradd --uid {me.uid} --gid {me.gid} "
            f"--no-create-home --home-dir {me.home} {me.name} && usermod --add-subuids "
            f"{SUBORDINATE_IDS} --add-subgids {SUBORDINATE_IDS} {me.name}"
        )
        made = subprocess.run(
            ["docker", "exec", self.box, "sh", "-c", script],
            capture_output=True, text=True, env=host_env(), check=False,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        conf = me.home / ".config" / "containers" / "boxed.conf"
        me.run("sh", "-c", f"cat > {conf} <<'EOF'\n{podman5_conf()}EOF")

    def podman(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`podman ARGS` as the account, where its service runs."""
        if not self.box:
            return self.me.run("podman", *args)
        return subprocess.run(
            self._as_account("podman", *args), capture_output=True, text=True,
            env=host_env(), timeout=600, check=False,
        )  # fmt: skip

    def start(self) -> None:
        me = self.me
        argv = self._as_account("podman", "system", "service", "--time=0", f"unix://{me.socket}")
        if self.box:
            self.process = subprocess.Popen(
                argv, env=host_env(), start_new_session=True,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        else:
            self.process = subprocess.Popen(
                argv, cwd=me.home, env=me.env(), preexec_fn=me.become(),
                start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while not me.socket.exists() and time.monotonic() < deadline:
            time.sleep(0.3)
        assert me.socket.exists(), "the account's Podman service did not start"

    def version(self) -> str:
        client = docker.DockerClient(base_url=f"unix://{self.me.socket}", version="auto")
        try:
            return str(client.version()["Version"])
        finally:
            client.close()

    def stop(self) -> None:
        if self.box:
            subprocess.run(["docker", "rm", "--force", self.box], capture_output=True,
                           env=host_env(), check=False)  # fmt: skip
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=30)


def save_images(
    engine: docker.DockerClient, archive: Path, names: list[str], renamed: dict[str, str]
) -> None:
    """One `docker save` archive of the default engine's `names`, and of `renamed` (the name
    it gets in the archive -> the image here): the layers the images share are in it once."""
    for tag, reference in renamed.items():
        engine.api.tag(reference, *tag.rsplit(":", 1))
    try:
        saved = subprocess.run(
            ["docker", "save", "--output", str(archive), *names, *renamed],
            capture_output=True, text=True, env=host_env(), check=False,
        )  # fmt: skip
        assert saved.returncode == 0, saved.stderr
    finally:
        for tag in renamed:  # the names made here, not the images
            with contextlib.suppress(docker.errors.APIError):
                engine.api.remove_image(tag, noprune=True)
    archive.chmod(0o644)


# These runs are about who owns the workspace, not GPUs. The session beside puts a fake CDI GPU
# in this host's /var/run/cdi for the engine contract's GPU test (engines.py, HOST_CDI), which
# rootless Podman 5 reads too: with --gpus auto, a run in that window asked for a GPU that was
# not there ("unresolvable CDI devices nvidia.com/gpu=all"), as a fresh-clone run saw.
NO_GPUS = ("--gpus", "none")


@pytest.fixture(scope="module", params=["podman", "podman5"])
def account(
    request: pytest.FixtureRequest,
    engine: docker.DockerClient,
    demo_base: str,
    wheelhouse: Path,
    demo_build: DemoBuild,
) -> Iterator[tuple[Account, Path, Path, Service]]:
    """The account, its Podman service (holding the demo's base and slim under the account's
    repository; on Podman 4.3 full too), the matrix and wheelhouse it builds from."""
    boxed = request.param == "podman5"
    for tool in ("newuidmap", "slirp4netns", "podman"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: run `make test-engines`")
    name = f"ikt{secrets.token_hex(3)}"
    uid = free_uid()
    subprocess.run(
        ["useradd", "--create-home", "--uid", str(uid), "--shell", "/bin/bash", name], check=True
    )
    entry = pwd.getpwnam(name)
    home = Path(entry.pw_dir)
    shared = Path(f"/tmp/imagekit-it-{name}")  # what the account may read of ours
    service: Service | None = None
    try:
        subuids = Path("/etc/subuid").read_text()
        if f"\n{name}:" not in f"\n{subuids}":
            subprocess.run(["usermod", "--add-subuids", SUBORDINATE_IDS, name], check=True)
            subprocess.run(["usermod", "--add-subgids", SUBORDINATE_IDS, name], check=True)
        runtime = shared / "run"
        runtime.mkdir(parents=True)
        os.chown(runtime, uid, entry.pw_gid)
        runtime.chmod(0o700)
        shared.chmod(0o755)
        # Its own imagekit, from what a clone of this checkout holds, with the system's Python.
        with tarfile.open(fileobj=io.BytesIO(checkout_tar())) as tar:
            # Our own checkout; the "data" filter where this Python has it (Debian 12's
            # 3.11.2 predates extraction filters).
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(shared / "src", **safe)  # type: ignore[arg-type]
        subprocess.run(["chmod", "-R", "a+rX", str(shared / "src")], check=True)
        # The wheels, linked (same file system), where the account can reach them.
        subprocess.run(["cp", "-al", str(wheelhouse), str(shared / "wheelhouse")], check=True)
        subprocess.run(["chmod", "-R", "a+rX", str(shared / "wheelhouse")], check=True)
        archive = shared / "images.tar"
        built = {n: demo_build.records[n]["build"]["reference"] for n in (SLIM, FULL)}
        # On Podman 5 the account builds full itself, FROM the demo's slim.
        loads = {f"{name}/pytorch:{n}": built[n] for n in ((SLIM,) if boxed else (SLIM, FULL))}
        save_images(engine, archive, [demo_base], loads)
        me = Account(name, uid, entry.pw_gid, home, runtime, home / "venv" / "bin" / "imagekit")
        config = home / ".config" / "containers"
        made = me.run("mkdir", "-p", str(config))
        assert made.returncode == 0, made.stderr
        me.run("sh", "-c", f"cat > {config}/storage.conf <<'EOF'\n{STORAGE_CONF}EOF")
        venv = me.run(
            "sh", "-c",
            f"python3 -m venv ~/venv && PYTHON=~/venv/bin/python"
            f" {shared}/src/imagekit/scripts/install.sh {shared}/src/imagekit",
        )  # fmt: skip
        assert venv.returncode == 0, venv.stderr[-3000:]
        with tun_open_to_all():
            service = Service(me, boxed)
            service.prepare()
            loaded = service.podman("load", "--input", str(archive))
            assert loaded.returncode == 0, loaded.stderr[-2000:]
            archive.unlink()
            service.start()
            assert service.version().startswith("5." if boxed else "4.3")
            matrix = shared / "matrix.yaml"
            matrix.write_text(matrix_text(f"{name}/pytorch", demo_base))
            matrix.chmod(0o644)
            yield me, matrix, shared / "wheelhouse", service
    finally:
        if service is not None:
            service.stop()
        # Everything the account runs (conmon, fuse-overlayfs, the service's children), then
        # what it mounted, then the account and its home with its containers and images.
        subprocess.run(["pkill", "-KILL", "-u", str(uid)], capture_output=True, check=False)
        time.sleep(1)
        for line in reversed(Path("/proc/mounts").read_text().splitlines()):
            target = line.split()[1]
            if target.startswith((str(home), str(shared))):
                subprocess.run(["umount", "-l", target], capture_output=True, check=False)
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(shared, ignore_errors=True)


def test_a_non_root_account_verifies_on_its_rootless_podman_and_builds_on_podman_5(
    account: tuple[Account, Path, Path, Service],
) -> None:
    me, matrix, wheelhouse, service = account
    results = me.home / "results"
    if service.box:
        built = me.run(
            str(me.imagekit), "build", "--matrix", str(matrix), "--flavour", "full",
            "--builder", "sdk", "--wheelhouse", str(wheelhouse), "--results", str(results),
            "--json",
        )  # fmt: skip
        assert built.returncode == 0, built.stderr[-3000:]
        statuses = {r["name"]: r["status"] for r in json.loads(built.stdout)["results"]}
        assert statuses == {FULL: "built"}
    verified = me.run(
        str(me.imagekit), "verify", "--matrix", str(matrix), "--flavour", "slim",
        "--results", str(results), "--json",
    )  # fmt: skip
    assert verified.returncode == 0, verified.stderr[-3000:]
    record = json.loads(verified.stdout)["images"][SLIM]["verify"]
    assert record["status"] == "pass" and record["level"] == "cpu"
    run = results / json.loads(verified.stdout)["run_id"]
    engine = json.loads((run / "run.json").read_text())["engine"]
    assert engine["name"] == "podman" and engine["endpoint"] == f"unix://{me.socket}"
    doctor = me.run(str(me.imagekit), "doctor")
    assert "rootless" in doctor.stdout, doctor.stdout[-2000:]


def test_a_notebook_saved_through_imagekit_run_belongs_to_the_account(
    account: tuple[Account, Path, Path, Service],
) -> None:
    me, _, _, service = account
    workspace = me.home / "work"
    assert me.run("mkdir", "-p", str(workspace)).returncode == 0
    reference = f"{me.name}/pytorch:{FULL}"
    port = free_port()
    process = subprocess.Popen(
        [str(me.imagekit), "run", reference, "--jupyter", "--workspace", str(workspace),
         "--port", f"{port}:8888", *NO_GPUS],
        cwd=me.home, env=me.env(), preexec_fn=me.become(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = wait_for_url(process, port)
        assert answers_with_token(url)
        base, token = url.split("/lab?token=")
        body = json.dumps({"type": "notebook", "format": "json", "content": {
            "cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}}).encode()  # fmt: skip
        put = urllib.request.Request(
            f"{base}/api/contents/saved.ipynb", data=body, method="PUT",
            headers={"Authorization": f"token {token}"},
        )  # fmt: skip
        with urllib.request.urlopen(put, timeout=30) as answer:
            assert answer.status == 201
        saved = workspace / "saved.ipynb"
        assert saved.stat().st_uid == me.uid and saved.stat().st_gid == me.gid
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-2000:]
    left = service.podman("ps", "--all", "--quiet", "--filter", "label=io.imagekit.run-id")
    assert left.stdout.strip() == ""


def test_a_command_run_through_imagekit_run_writes_the_workspace_as_the_account(
    account: tuple[Account, Path, Path, Service],
) -> None:
    me, _, _, _ = account
    workspace = me.home / "cmd"
    assert me.run("mkdir", "-p", str(workspace)).returncode == 0
    done = me.run(
        str(me.imagekit), "run", f"{me.name}/pytorch:{SLIM}", "--workspace", str(workspace),
        *NO_GPUS, "--", "python", "-c", "open('/workspace/written.txt', 'w').write('x')",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    written = workspace / "written.txt"
    assert written.stat().st_uid == me.uid and written.stat().st_gid == me.gid
