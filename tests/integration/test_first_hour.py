"""A newcomer's first hour, as typed (issue 28), as root and as a real non-root host account.

The account is made by the test (useradd, in the `docker` group, a home of its own) and runs
the docker CLI and imagekit itself: folder ownership alone is not a user.

- The seed's `docker run -v $(pwd):/workspace -p PORT:8888 FULL`, from the person's own folder:
  a notebook made and saved through JupyterLab in Chromium (click, type, Ctrl+S) belongs to
  that person, root included (a root-owned folder only root can write is served as root, and
  one line says so).
- `--user` is used exactly as given, `0:0` included; `docker exec` is root, the door an admin
  uses, and `docker exec -u ml` is the user the services run as.
- `imagekit run` in every mode writes the workspace as its owner; it shows the container's
  lines from its first one; the ssh command it prints works as pasted, with `-i KEY` where it
  is needed, and its readiness check leaves nothing in sshd's log.
- The CLI that `make demo` installs runs for every user of the machine.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from tests.children import default_stop_signals
from tests.integration.browser import chromium_page, save_a_notebook_through_the_ui
from tests.integration.conftest import ROOT, TEST_LABEL, TEST_LABELS, DemoBuild
from tests.integration.test_rootless_podman import free_uid
from tests.integration.test_workstation import ARTIFACTS, free_port, wait_http

pytestmark = pytest.mark.integration

FULL = "2.13.0-cpu-py3.11-full"
SLIM = "2.13.0-cpu-py3.11-slim"
ROOT_LINE = "running as root: /workspace belongs to root"


@dataclass(frozen=True)
class Person:
    """Who types the commands: root, or a host account in the docker group."""

    name: str
    uid: int
    gid: int
    home: Path

    def become(self) -> Callable[[], None] | None:
        """A preexec_fn that makes the child this person (None for root: the test is root)."""
        if self.uid == 0:
            return None
        docker_gid = grp.getgrnam("docker").gr_gid

        def child() -> None:
            os.setgroups([self.gid, docker_gid])
            os.setgid(self.gid)
            os.setuid(self.uid)
            default_stop_signals()

        return child

    def env(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "CI", "PIP_CERT")}
        return {**keep, "HOME": str(self.home), "USER": self.name, "LOGNAME": self.name}

    def project(self) -> Path:
        """A fresh project folder of this person's, made as `mkdir` makes it (0755)."""
        folder = self.home / f"project-{secrets.token_hex(3)}"
        done = self.run("mkdir", "-m", "0755", str(folder))
        assert done.returncode == 0, done.stderr
        return folder

    def run(
        self, *argv: str, cwd: Path | None = None, timeout_s: int = 300
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), cwd=cwd or self.home, env=self.env(), preexec_fn=self.become(),
            capture_output=True, text=True, timeout=timeout_s, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def popen(self, *argv: str, cwd: Path) -> subprocess.Popen[str]:
        return subprocess.Popen(
            list(argv), cwd=cwd, env=self.env(), preexec_fn=self.become() or default_stop_signals,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip


@contextlib.contextmanager
def host_account(prefix: str) -> Iterator[Person]:
    """A non-root host account in the docker group, removed afterwards with its home and its
    processes (the HPC tests use it too: tests/integration/hpc.py)."""
    name = f"{prefix}{secrets.token_hex(3)}"
    subprocess.run(
        ["useradd", "--create-home", "--uid", str(free_uid(1500)), "--groups", "docker",
         "--shell", "/bin/bash", name],
        check=True,
    )  # fmt: skip
    entry = pwd.getpwnam(name)
    try:
        yield Person(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True, check=False)
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)
        shutil.rmtree(entry.pw_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def account() -> Iterator[Person]:
    """A non-root host account in the docker group, removed afterwards with its home."""
    with host_account("ikh") as person:
        yield person


@pytest.fixture(scope="module")
def root_person(tmp_path_factory: pytest.TempPathFactory) -> Person:
    """Root, typing in a folder of its own (root's home would do; this one is removed)."""
    return Person("root", 0, 0, tmp_path_factory.mktemp("root-home"))


@pytest.fixture(params=["root", "account"])
def person(request: pytest.FixtureRequest, root_person: Person) -> Person:
    found: Person = root_person if request.param == "root" else request.getfixturevalue("account")
    return found


@pytest.fixture
def named(engine: docker.DockerClient) -> Iterator[list[str]]:
    """Names of containers a test started through the docker CLI; removed afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        with contextlib.suppress(docker.errors.NotFound):
            engine.containers.get(name).remove(force=True, v=True)


def reference(demo_build: DemoBuild, name: str) -> str:
    return str(demo_build.records[name]["build"]["reference"])


def seed_command(
    person: Person, image: str, folder: Path, port: int, name: str, token: str
) -> subprocess.CompletedProcess[str]:
    """The seed's `docker run -it -v $(pwd):/workspace -p 8888:8888 IMAGE`, typed in `folder`
    (detached instead of -it, which needs a terminal; a free port instead of 8888)."""
    return person.run(
        "docker", "run", "-d", "--name", name, "--label", f"{TEST_LABEL}={TEST_LABELS[TEST_LABEL]}",
        "-e", f"JUPYTER_TOKEN={token}", "-v", f"{folder}:/workspace", "-p", f"{port}:8888", image,
        cwd=folder,
    )  # fmt: skip


# The seed's command --------------------------------------------------------------------------


def test_the_seed_command_saves_a_notebook_made_in_jupyterlab_as_the_person_who_typed_it(
    person: Person, demo_build: DemoBuild, named: list[str], engine: docker.DockerClient,
    tmp_path: Path,
) -> None:  # fmt: skip
    folder = person.project()
    port, token, name = free_port(), secrets.token_hex(16), f"ikt-seed-{secrets.token_hex(4)}"
    named.append(name)
    started = seed_command(person, reference(demo_build, FULL), folder, port, name, token)
    assert started.returncode == 0, started.stderr
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/api")
    with chromium_page(tmp_path / "profile") as page:
        problem = save_a_notebook_through_the_ui(page, base, token, "print(6 * 7)")
        page.screenshot(ARTIFACTS / f"seed-saved-as-{person.name if person.uid else 'root'}.png")
    logs = engine.containers.get(name).logs().decode()
    assert problem == "", f"{problem}\n{logs}"
    saved = folder / "Untitled.ipynb"
    assert "print(6 * 7)" in saved.read_text()
    assert (saved.stat().st_uid, saved.stat().st_gid) == (person.uid, person.gid)
    said = [line for line in logs.splitlines() if ROOT_LINE in line]
    assert len(said) == (1 if person.uid == 0 else 0), logs


def test_user_is_used_exactly_as_given_root_included(
    demo_build: DemoBuild, root_person: Person
) -> None:
    image = reference(demo_build, FULL)
    for given, uid in (("0:0", "0"), ("root", "0"), ("4321:4321", "4321")):
        done = root_person.run("docker", "run", "--rm", "--user", given, image, "id", "-u")
        assert done.returncode == 0 and done.stdout.strip() == uid, (given, done.stderr)
        assert ("as --user asked" in done.stderr) == (uid == "0"), done.stderr
    # Without --user and nothing mounted: the image's own /workspace, the image's user.
    done = root_person.run("docker", "run", "--rm", image, "id", "-u")
    assert done.stdout.strip() == "1000", done.stderr


def test_docker_exec_is_root_and_exec_as_ml_writes_the_workspace_as_its_owner(
    account: Person, demo_build: DemoBuild, named: list[str]
) -> None:
    folder = account.project()
    port, token, name = free_port(), secrets.token_hex(16), f"ikt-exec-{secrets.token_hex(4)}"
    named.append(name)
    started = seed_command(account, reference(demo_build, FULL), folder, port, name, token)
    assert started.returncode == 0, started.stderr
    wait_http(f"http://127.0.0.1:{port}/api")
    plain = account.run("docker", "exec", name, "id", "-u")
    assert plain.stdout.strip() == "0", plain.stderr
    shell = account.run("docker", "exec", name, "bash", "-i", "-c", "true")
    assert "the services run as ml (docker exec -it -u ml CONTAINER bash" in shell.stderr
    as_ml = account.run("docker", "exec", "-u", "ml", name, "sh", "-c", "id -u; touch /workspace/e")
    assert as_ml.stdout.split() == [str(account.uid)], as_ml.stderr
    assert (folder / "e").stat().st_uid == account.uid


# imagekit run, every mode --------------------------------------------------------------------


def imagekit_cli(person: Person, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI this checkout's venv holds, as `person` types it."""
    return person.run(sys.executable, "-m", "imagekit", *args, cwd=cwd, timeout_s=600)


@pytest.mark.parametrize("flavour", [FULL, SLIM])
def test_imagekit_run_command_writes_the_workspace_as_its_owner(
    person: Person, demo_build: DemoBuild, flavour: str
) -> None:
    folder = person.project()
    write = "import os; open('/workspace/out', 'w').write(str(os.getuid()))"
    done = imagekit_cli(
        person, "run", reference(demo_build, flavour), "--workspace", str(folder),
        "--", "python", "-c", write, cwd=folder,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert (folder / "out").stat().st_uid == person.uid


def test_the_cli_make_demo_installs_runs_for_every_user(account: Person) -> None:
    done = account.run(sys.executable, "-m", "imagekit", "--version", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "Permission denied" not in done.stderr


def stop(process: subprocess.Popen[str]) -> str:
    """SIGINT, as Ctrl-C; what it wrote to stderr."""
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    return stderr


def test_imagekit_run_shows_the_containers_lines_from_its_first_one(
    person: Person, demo_build: DemoBuild
) -> None:
    folder = person.project()
    port = free_port()
    process = person.popen(
        sys.executable, "-m", "imagekit", "run", reference(demo_build, FULL), "--tensorboard",
        "--workspace", str(folder), "--port", f"{port}:6006", cwd=ROOT,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url == f"http://127.0.0.1:{port}/", url
    finally:
        stderr = stop(process)
    # Written by the container before TensorBoard answered: shown all the same.
    assert "TensorBoard has NO authentication" in stderr, stderr
    assert (ROOT_LINE in stderr) == (person.uid == 0), stderr


def test_the_printed_ssh_command_works_as_pasted_and_the_readiness_check_is_silent(
    person: Person, demo_build: DemoBuild
) -> None:
    folder = person.project()
    key = person.home / f"lab_key_{secrets.token_hex(2)}"
    made = person.run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
    assert made.returncode == 0, made.stderr
    port = free_port()
    process = person.popen(
        sys.executable, "-m", "imagekit", "run", reference(demo_build, FULL), "--ssh",
        "--authorized-keys", f"{key}.pub", "--workspace", str(folder),
        "--port", f"{port}:2222", cwd=ROOT,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        printed = process.stdout.readline().strip()
        user = "root" if person.uid == 0 else "ml"
        assert printed == f"ssh -i {key} -p {port} {user}@127.0.0.1", printed
        # As pasted, with what a first login to a new host needs without a terminal.
        quiet = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                 "-o", "UserKnownHostsFile=/dev/null"]  # fmt: skip
        words = printed.split()
        login = person.run(*words[:1], *quiet, *words[1:], "id -u && touch /workspace/over-ssh")
        assert login.returncode == 0, login.stderr
        assert login.stdout.split()[-1] == str(person.uid if person.uid else 0)
        assert (folder / "over-ssh").stat().st_uid == person.uid
        time.sleep(1)
    finally:
        stderr = stop(process)
    assert "kex_exchange_identification" not in stderr, stderr
    assert "Connection closed by" not in stderr.split("Accepted publickey")[0], stderr
