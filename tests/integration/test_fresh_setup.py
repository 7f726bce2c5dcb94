"""The project's set-up, proven from nothing: `make engine venv base` from a copy of this
checkout in a pristine Debian 12 and a pristine Debian 13 container, each a fresh machine of
the kind the README's quick start names (Python, make, the docker CLI, no engine, no systemd).

A warm developer machine hides a missing install step; these boxes cannot. Each is made once
per machine by `imagekit base bootstrap` and kept on the default engine (tests/integration/
engines.py `box_image`); what runs in it is thrown away with it. It gets what an engine needs
to run inside a container (the capabilities and cgroups of BOX_RUN_OPTIONS, its storage on a
volume) and a network of its own, so the engine it installs makes its own docker0.
"""

from __future__ import annotations

import io
import os
import secrets
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT
from tests.integration.engines import BOX_RUN_OPTIONS, box_image

# In the session beside the main one (marker `contract`, scripts/run-tests.sh): its boxes
# start engines of their own and use none of the main session's images.
pytestmark = [pytest.mark.integration, pytest.mark.contract]

# A fresh machine of this kind: Debian with Python and make; the docker CLI comes from the
# host, as these machines come with it (a static binary).
PRISTINE_INCLUDE = ("python3", "python3-venv", "make", "ca-certificates", "procps")
DOCKER_CLI = Path(shutil.which("docker") or "/usr/local/bin/docker")
# The CA bundle pip is told about on the host (a TLS-intercepting proxy's CA), as a corporate
# user sets PIP_CERT: the box trusts what the host trusts.
HOST_CA = Path(os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt")
SETUP_TIMEOUT_S = 1500


@dataclass(frozen=True)
class Release:
    suite: str
    engine_line: str  # what `make engine` says once the engine answers
    installed: str  # what it says it installs


RELEASES = {
    "debian12": Release(
        "bookworm",
        "engine ready: Docker 20.10.",
        "installing this release's docker.io 20.10",
    ),
    "debian13": Release(
        "trixie",
        "engine ready: Docker 26.1.",
        "installing Docker 26 (this release's docker.io 26.1",
    ),
}


def host_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}


def checkout_tar() -> bytes:
    """This checkout as a fresh clone would have it: tracked files and new ones git does not
    ignore (no .venv, no build output)."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in filter(None, names):
            if (ROOT / name).exists():
                tar.add(ROOT / name, arcname=f"imagekit/{name}", recursive=False)
    return buffer.getvalue()


@dataclass
class Box:
    name: str

    def sh(self, script: str, timeout_s: int = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", "exec", self.name, "bash", "-c", script],
            capture_output=True, text=True, timeout=timeout_s, env=host_env(), check=False,
        )  # fmt: skip


def start_box(key: str, release: Release, folder: Path) -> Box:
    """A pristine box of `release`, a copy of this checkout in it, nothing installed yet."""
    image = box_image(f"imagekit-box/pristine:{release.suite}", PRISTINE_INCLUDE, release.suite)
    name = f"imagekit-it-fresh-{key}-{secrets.token_hex(3)}"
    (folder / "checkout.tar").write_bytes(checkout_tar())
    argv = [
        "docker", "run", "--detach", "--name", name, "--init", "--hostname", name,
        *BOX_RUN_OPTIONS,
        "--volume", f"{name}:/var/lib/docker",
        "--volume", f"{folder}:/in:ro",
        "--volume", f"{DOCKER_CLI}:/usr/local/bin/docker:ro",
        "--volume", f"{HOST_CA}:/etc/imagekit-host-ca.crt:ro",
        "--env", "PIP_CERT=/etc/imagekit-host-ca.crt",
        "--label", "io.imagekit.test-box=1",
        image, "sleep", "infinity",
    ]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True, env=host_env())
    return Box(name)


def remove_box(box: Box) -> None:
    subprocess.run(["docker", "rm", "--force", box.name], capture_output=True, env=host_env())
    subprocess.run(["docker", "volume", "rm", box.name], capture_output=True, env=host_env())


@dataclass(frozen=True)
class SetUp:
    box: Box
    before: subprocess.CompletedProcess[str]  # is there an engine before the set-up?
    done: subprocess.CompletedProcess[str]  # `make engine venv base`


SET_UP = (
    "mkdir -p /work && tar -C /work -xf /in/checkout.tar && cd /work/imagekit && "
    "make engine venv base 2>&1"
)


@pytest.fixture(scope="module")
def set_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SetUp]]:
    """Each release's box, set up at the same time as the other's: a set-up waits on the
    package mirror and the disk as well as on the CPU, and one after the other the two took
    164 s of the session beside the main one."""
    boxes: dict[str, Box] = {}
    try:
        for key in sorted(RELEASES):
            folder = tmp_path_factory.mktemp(f"fresh-{key}")
            boxes[key] = start_box(key, RELEASES[key], folder)

        def run(box: Box) -> SetUp:
            before = box.sh("command -v dockerd || docker info")
            return SetUp(box, before, box.sh(SET_UP, timeout_s=SETUP_TIMEOUT_S))

        with ThreadPoolExecutor(max_workers=len(boxes)) as pool:
            done = dict(zip(boxes, pool.map(run, boxes.values()), strict=True))
        yield done
    finally:
        for box in boxes.values():
            remove_box(box)


@pytest.mark.parametrize("key", sorted(RELEASES))
def test_make_engine_venv_and_base_set_up_a_pristine_machine(
    set_up: dict[str, SetUp], key: str
) -> None:
    release, box, done = RELEASES[key], set_up[key].box, set_up[key].done
    assert set_up[key].before.returncode != 0  # nothing there before
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-4000:]
    assert release.installed in said, said[-4000:]
    assert release.engine_line in said, said[-4000:]
    daemon_json = box.sh("cat /etc/docker/daemon.json").stdout
    if release.suite == "bookworm":
        # Docker 20.10 has no containerd image store: nothing may claim it is on.
        assert "containerd image store" not in said and daemon_json == ""
        assert "classic image store" in said
    else:
        assert "containerd image store" in said and "containerd-snapshotter" in daemon_json
    # The engine answers, holds the demo's base, and builds and runs a small image from it.
    built = box.sh(
        "cd /tmp && printf 'FROM imagekit-base/debian:bookworm\\n"
        'RUN python3 -c "print(6 * 7)" > /answer\\n\' > Dockerfile && '
        "docker build -q -t small . >/dev/null && docker run --rm small cat /answer"
    )
    assert built.returncode == 0 and built.stdout.strip() == "42", built.stderr[-2000:]
    imagekit = box.sh("/work/imagekit/.venv/bin/imagekit --version")
    assert imagekit.returncode == 0 and imagekit.stdout.startswith("imagekit "), imagekit.stderr
