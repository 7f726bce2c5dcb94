"""The images as users use them, with plain `docker run` (issue 15).

- The seed's `docker run -v $(pwd):/workspace -p 8888:8888 IMAGE` saves a notebook that
  belongs to the host user, for a non-root host user (no --user) and for a root host user
  (a folder only root can write is served as root, in one line); IMAGEKIT_ALLOW_ROOT=1 asks for
  root whatever the folder; `--user UID:GID` works for any uid, `docker exec` included. A
  host user is stood in for by the owner of the mounted folder (tests/integration/
  test_first_hour.py has real accounts).
- The default user of full installs packages; the torch stack stays as verified.
- `import torch` is silent; /dev/shm under 1 GiB gets one warning line.

A slim with `compile: false` (its label, its compile probe's skip, its first torch.compile's
notice) is the engine contract's own slim: test_engine_contract.py checks it on every engine.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import secrets
import signal
import zipfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container

from tests.integration.conftest import (
    TEST_LABELS,
    DemoBuild,
)
from tests.integration.test_run_ends import start_jupyter_run, wait_for_url
from tests.integration.test_workstation import free_port, http, wait_http

pytestmark = pytest.mark.integration

FULL = "2.13.0-cpu-py3.11-full"
SLIM = "2.13.0-cpu-py3.11-slim"
HOST_UID, HOST_GID = 4321, 4321  # a non-root host user the image has never heard of
SHM_LINE = "/dev/shm is 64 MiB (under 1 GiB)"


@pytest.fixture(scope="module")
def full_image(demo_build: DemoBuild) -> str:
    return demo_build.records[FULL]["build"]["image_id"]


@pytest.fixture
def containers(engine: docker.DockerClient) -> Iterator[list[Container]]:
    made: list[Container] = []
    yield made
    for container in made:
        container.remove(force=True, v=True)


def folder_of(tmp_path: Path, uid: int, gid: int) -> Path:
    """A host user's project folder, 0755 as `mkdir` makes it."""
    folder = tmp_path / f"project-{uid}"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    os.chown(folder, uid, gid)
    return folder


def seed_run(
    engine: docker.DockerClient,
    containers: list[Container],
    image: str,
    folder: Path,
    **kwargs: object,
) -> tuple[str, str, Container]:
    """`docker run -v FOLDER:/workspace -p PORT:8888 IMAGE`, as the seed types it."""
    token = secrets.token_hex(16)
    port = free_port()
    environment = {"JUPYTER_TOKEN": token, **dict(kwargs.pop("environment", {}))}  # type: ignore[call-overload]
    container = engine.containers.run(
        image,
        detach=True,
        ports={"8888/tcp": ("127.0.0.1", port)},
        volumes={str(folder): {"bind": "/workspace", "mode": "rw"}},
        environment=environment,
        labels=TEST_LABELS,
        **kwargs,
    )
    containers.append(container)
    wait_http(f"http://127.0.0.1:{port}/api")
    return f"http://127.0.0.1:{port}", token, container


def save_notebook(base: str, token: str, name: str) -> int:
    """Save a notebook through Jupyter's contents API, as the Save button does."""
    notebook = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    body = json.dumps({"type": "notebook", "format": "json", "content": notebook}).encode()
    status, _, _ = http(f"{base}/api/contents/{name}", token, method="PUT", body=body)
    return int(status)


def jupyter_uid(container: Container) -> str:
    """The uid the Jupyter server process runs as (the engine's view of the container)."""
    top = container.top(ps_args="-o pid,uid,args")  # the engine needs the PID column
    server = ("jupyter lab", "jupyter-lab")  # not tini's `imagekit-entrypoint jupyter`
    return str(next(p[1] for p in top["Processes"] if any(s in p[2] for s in server))).strip()


# The seed's command -------------------------------------------------------------------------


def test_a_non_root_host_users_notebook_is_saved_as_that_user_without_user(
    engine: docker.DockerClient, containers: list[Container], full_image: str, tmp_path: Path
) -> None:
    folder = folder_of(tmp_path, HOST_UID, HOST_GID)
    base, token, container = seed_run(engine, containers, full_image, folder)
    assert save_notebook(base, token, "analysis.ipynb") == 201, container.logs().decode()
    saved = (folder / "analysis.ipynb").stat()
    assert (saved.st_uid, saved.st_gid) == (HOST_UID, HOST_GID)
    assert jupyter_uid(container) == str(HOST_UID)
    # docker exec knows the user by name, with a home of its own.
    command = 'id -u; id -un; touch "$HOME/x" && echo "$HOME"'
    done = container.exec_run(["bash", "-c", command], user="ml")
    assert done.exit_code == 0, done.output
    assert done.output.decode().split() == [str(HOST_UID), "ml", "/home/ml"]


def test_a_root_host_users_own_folder_is_served_as_root_and_one_line_says_so(
    engine: docker.DockerClient, containers: list[Container], full_image: str, tmp_path: Path
) -> None:
    """A folder only root can write (a root host user's project, the usual case on a GPU
    server) is served as root, as PyTorch's and NVIDIA's images do: what is saved is root's."""
    folder = folder_of(tmp_path, 0, 0)
    base, token, container = seed_run(engine, containers, full_image, folder)
    assert save_notebook(base, token, "mine.ipynb") == 201
    saved = (folder / "mine.ipynb").stat()
    assert (saved.st_uid, saved.st_gid) == (0, 0)
    assert jupyter_uid(container) == "0"
    logs = container.logs().decode()
    said = [line for line in logs.splitlines() if "running as root" in line]
    assert len(said) == 1 and "/workspace belongs to root" in said[0], logs


def test_imagekit_allow_root_runs_as_root_whatever_the_folder(
    engine: docker.DockerClient, containers: list[Container], full_image: str, tmp_path: Path
) -> None:
    folder = folder_of(tmp_path, HOST_UID, HOST_GID)
    base, token, container = seed_run(
        engine, containers, full_image, folder, environment={"IMAGEKIT_ALLOW_ROOT": "1"}
    )
    assert save_notebook(base, token, "rooted.ipynb") == 201
    assert (folder / "rooted.ipynb").stat().st_uid == 0
    assert jupyter_uid(container) == "0"
    assert "running as root because IMAGEKIT_ALLOW_ROOT=1" in container.logs().decode()


def test_user_uid_gid_saves_and_docker_exec_has_a_name_and_a_home(
    engine: docker.DockerClient, containers: list[Container], full_image: str, tmp_path: Path
) -> None:
    folder = folder_of(tmp_path, HOST_UID, HOST_GID)
    base, token, container = seed_run(
        engine, containers, full_image, folder, user=f"{HOST_UID}:{HOST_GID}"
    )
    assert save_notebook(base, token, "typed.ipynb") == 201, container.logs().decode()
    assert (folder / "typed.ipynb").stat().st_uid == HOST_UID
    assert "Running as root" not in container.logs().decode()
    done = container.exec_run(["bash", "-c", 'id -un; touch "$HOME/x" && echo "$HOME"'])
    assert done.exit_code == 0, done.output
    name, home = done.output.decode().split()
    assert name == "user" and home.startswith(f"/tmp/home-{HOST_UID}")


@pytest.mark.parametrize("owner", [0, HOST_UID], ids=["root-host-user", "non-root-folder"])
def test_imagekit_run_saves_a_notebook_that_belongs_to_the_workspaces_owner(
    demo_build: DemoBuild, tmp_path: Path, owner: int
) -> None:
    # These tests run as root: a root-owned folder is a root host user's own; a folder of
    # uid 4321 is what a non-root host user's folder looks like to the engine.
    folder = folder_of(tmp_path, owner, owner)
    port = free_port()
    process = start_jupyter_run(str(demo_build.records[FULL]["build"]["reference"]), folder, port)
    try:
        base, token = wait_for_url(process, port).split("/lab?token=")
        assert save_notebook(base, token, "run.ipynb") == 201
        assert (folder / "run.ipynb").stat().st_uid == owner
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    assert ("running as root: /workspace belongs to root" in stderr) == (owner == 0), stderr


# Packages in full ---------------------------------------------------------------------------


def wheel(name: str, version: str, requires: tuple[str, ...] = ()) -> tuple[str, bytes]:
    """A pure-Python wheel made by hand: one module that says its name."""
    dist = f"{name.replace('-', '_')}-{version}"
    files = {
        f"{name.replace('-', '_')}.py": f"NAME = {name!r}\n",
        f"{dist}.dist-info/METADATA": "Metadata-Version: 2.1\n"
        f"Name: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{dist}.dist-info/RECORD"] = "\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return f"{dist}-py3-none-any.whl", buffer.getvalue()


def test_the_default_user_pip_installs_and_the_torch_stack_stays_as_verified(
    engine: docker.DockerClient, full_image: str, tmp_path: Path
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name, version, requires in (
        ("handy-tool", "1.0", ()),
        ("wants-old-torch", "1.0", ("torch==2.0.0",)),
    ):
        filename, data = wheel(name, version, requires)
        (wheels / filename).write_bytes(data)
    script = (
        "pip install --no-index --find-links /wheels handy-tool 2>&1 | tail -n 3; "
        "python -c 'import handy_tool, sys; print(\"IMPORTED\", handy_tool.__file__)'; "
        "pip install --no-index --find-links /wheels wants-old-torch 2>&1 | tail -n 8; "
        'echo "REFUSED=${PIPESTATUS[0]}"; '
        "python -c 'import torch; print(\"TORCH\", torch.__version__)'"
    )
    out = engine.containers.run(
        full_image,
        ["bash", "-c", script],
        volumes={str(wheels): {"bind": "/wheels", "mode": "ro"}},
        labels=TEST_LABELS,
        remove=True,
    ).decode()
    assert "IMPORTED /home/ml/.local/lib/python3.11/site-packages/handy_tool.py" in out, out
    assert "REFUSED=1" in out and "torch==2.0.0" in out, out
    assert "TORCH 2.13.0+cpu" in out, out


# Start-up: silent import, /dev/shm --------------------------------------------------------


@pytest.mark.parametrize("flavour", ["slim", "full"])
def test_import_torch_is_silent_with_enough_shm_and_one_line_warns_with_dockers_default(
    engine: docker.DockerClient, demo_build: DemoBuild, flavour: str
) -> None:
    image = demo_build.records[f"2.13.0-cpu-py3.11-{flavour}"]["build"]["image_id"]

    def stderr_of(code: str = "import torch", **kwargs: object) -> str:
        command = ["python3", "-c", code]
        container = engine.containers.run(image, command, detach=True, labels=TEST_LABELS, **kwargs)
        try:
            assert container.wait(timeout=120)["StatusCode"] == 0
            return container.logs(stdout=False, stderr=True).decode()
        finally:
            container.remove(force=True)

    assert stderr_of(shm_size="2g") == ""
    said = stderr_of()
    assert said.count(SHM_LINE) == 1 and "--shm-size" in said, said
    assert "IMAGEKIT_SHM_CHECK=0 silences this line" in said
    assert len(said.strip().splitlines()) == 1, said
    assert stderr_of(environment={"IMAGEKIT_SHM_CHECK": "0"}) == ""
    if flavour == "slim":  # no entrypoint: told at `import torch`, never before
        assert stderr_of("print(1)") == ""
