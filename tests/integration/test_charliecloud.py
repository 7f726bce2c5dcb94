"""Where researchers run the images: Charliecloud's `ch-run`, as a real non-root host account
(issue 48), with no flag beyond what docs/how-to/hpc.md says.

- `imagekit verify --runtime charliecloud` exports the demo slim from the engine and runs the
  same probes under ch-run as that account: the same results as Docker's verify, the runtime in
  the record and on the page.
- The GPU path: `--gpus all` injects the host's driver files with `ch-fromhost --nvidia`, which
  asks `nvidia-container-cli`. This machine has no GPU, so a stand-in lister names a stub NVML
  library (as the CDI fake GPU of engines.py does for Docker and Podman): the probe inside sees
  it where ch-fromhost put it. ch-run gives the container the host's own /dev, so no fake
  device node can be shown there without making one in the host's /dev; this test does not.
- An image whose venv is not on the host's PATH (the demo slim without the files the template
  adds) fails verify under ch-run, with that reason.
- Root is refused (it would prove the image as root), and a runtime that is not installed is
  one line naming what to install.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.integration.conftest import TEST_LABELS, DemoBuild, imagekit
from tests.integration.test_first_hour import Person, host_account

pytestmark = [pytest.mark.integration, pytest.mark.beside]

SLIM = "2.13.0-cpu-py3.11-slim"
# What the demo slim lacks without the template's HPC step (templates/Dockerfile.j2).
HPC_FILES = (
    "/usr/local/bin/python3 /usr/local/bin/python /usr/local/bin/torchrun /ch/environment "
    "/.singularity.d/env/80-imagekit.sh /etc/environment"
)


@pytest.fixture(scope="module")
def researcher() -> Iterator[Person]:
    if shutil.which("ch-run") is None:
        pytest.fail(
            "ch-run is missing: make test installs charliecloud (scripts/ensure-test-engines.sh)"
        )
    with host_account("ikc") as person:
        yield person


def as_researcher(
    person: Person, *args: str, path_first: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`imagekit ARGS` typed by `person` in a project folder of their own (`path_first`: a
    folder put ahead on their PATH)."""
    path = f"{path_first}:{os.environ['PATH']}" if path_first else os.environ["PATH"]
    return person.run(
        "env", f"PATH={path}", sys.executable, "-m", "imagekit", *args,
        cwd=person.home, timeout_s=900,
    )  # fmt: skip


def reference(demo_build: DemoBuild, name: str) -> str:
    return str(demo_build.records[name]["build"]["reference"])


def no_scratch_left(person: Person) -> None:
    """Every export went with its run: nothing of the account's in the temporary folder."""
    left = [p for p in Path("/tmp").glob("imagekit-ch-*") if p.stat().st_uid == person.uid]
    assert left == [], left


def test_verify_under_charliecloud_as_a_user_passes_as_under_docker(
    researcher: Person, demo_build: DemoBuild, tmp_path: Path
) -> None:
    """Three probes (the whole set runs under Slurm's ch-run in test_slurm.py), the structure
    checks, the record and the summary, against Docker's verify of the same three (here, not
    the session's demo_verify: this module runs beside the main session, which would build
    and verify the whole demo matrix a second time for it)."""
    slim = reference(demo_build, SLIM)
    probes = "env,autograd,ddp"
    asked = ("verify", slim, "--runtime", "charliecloud", "--probes", probes, "--json")
    done = as_researcher(researcher, *asked)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    (record,) = json.loads(done.stdout)["images"].values()
    verify = record["verify"]
    on_docker = imagekit("verify", slim, "--probes", probes, "--results", str(tmp_path), "--json")
    assert on_docker.code == 0, on_docker.stderr[-3000:]
    (docker_record,) = json.loads(on_docker.stdout)["images"].values()
    docker_verify = docker_record["verify"]
    assert verify["runtime"] == "charliecloud" and docker_verify["runtime"] == "docker"
    statuses = {p["probe"]: p["status"] for p in verify["probes"]}
    assert statuses == {
        p["probe"]: p["status"] for p in docker_verify["probes"] if p["probe"] in statuses
    }
    assert set(statuses) == set(probes.split(",")) and set(statuses.values()) == {"pass"}
    assert all(c["ok"] for c in verify["structure"]), verify["structure"]
    env = next(p for p in verify["probes"] if p["probe"] == "env")
    assert env["facts"]["uid"] == researcher.uid, env["facts"]
    run = researcher.home / "results" / json.loads(done.stdout)["run_id"]
    assert "linux/amd64 under charliecloud" in (run / "summary.md").read_text()
    no_scratch_left(researcher)


def test_the_gpu_path_injects_the_hosts_driver_files_as_nvidia_lists_them(
    researcher: Person, demo_build: DemoBuild
) -> None:
    slim = reference(demo_build, SLIM)
    asked = ("verify", slim, "--runtime", "charliecloud", "--gpus", "all", "--probes", "env",
             "--no-structure", "--json")  # fmt: skip
    refused = as_researcher(researcher, *asked)
    assert refused.returncode == 3, refused
    assert "nvidia-container-cli is not on PATH" in refused.stderr
    # Where the account can reach it (pytest's own folders are root's alone).
    fake = Path(tempfile.mkdtemp(prefix="imagekit-fake-nvidia-"))
    try:
        fake.chmod(0o755)
        (fake / "bin").mkdir(mode=0o755)
        stub = fake / "libnvidia-ml.so.1"
        stub.write_bytes(b"")  # a stub: nothing loads it, the probe only looks for it
        lister = fake / "bin" / "nvidia-container-cli"
        lister.write_text(
            f"#!/bin/sh\n# a host without a GPU: the stub NVML library\necho {stub}\n"
        )
        lister.chmod(0o755)
        done = as_researcher(researcher, *asked, path_first=fake / "bin")
    finally:
        shutil.rmtree(fake)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    (record,) = json.loads(done.stdout)["images"].values()
    (env,) = record["verify"]["probes"]
    assert env["facts"]["driver_libraries"] == ["/usr/local/lib/libnvidia-ml.so.1"], env["facts"]
    # The CPU build of torch cannot use a GPU that is not there: a probe failure, exit 5.
    assert done.returncode == 5 and env["facts"]["cuda_available"] is False
    no_scratch_left(researcher)


def test_an_image_whose_venv_is_not_on_the_hosts_path_fails_with_that_reason(
    researcher: Person, demo_build: DemoBuild, engine: docker.DockerClient
) -> None:
    slim = reference(demo_build, SLIM)
    dockerfile = f"FROM {slim}\nUSER 0\nRUN rm {HPC_FILES}\nUSER 1000:100\n"
    tag = f"imagekit-test/no-hpc:{secrets.token_hex(4)}"
    engine.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=tag, labels=TEST_LABELS, rm=True, forcerm=True
    )
    try:
        done = as_researcher(
            researcher, "verify", tag, "--runtime", "charliecloud", "--probes", "env", "--json"
        )
        assert done.returncode == 5, done.stderr[-3000:]
        (record,) = json.loads(done.stdout)["images"].values()
        failed = {c["name"]: c["detail"] for c in record["verify"]["structure"] if not c["ok"]}
        reason = failed["python3 on a host's PATH is the venv's (ch-run without --set-env)"]
        assert "not the venv /opt/venv's, and import torch fails" in reason
        (env,) = record["verify"]["probes"]
        assert env["status"] != "pass"
        assert "No module named 'torch'" in json.dumps(env) or env["status"] == "error"
    finally:
        engine.images.remove(tag, force=True)
    no_scratch_left(researcher)


def test_root_and_a_runtime_not_installed_are_refused_before_any_engine_call() -> None:
    as_root = imagekit("verify", "no/such:image", "--runtime", "charliecloud")
    assert as_root.code == 2 and "you are root" in as_root.stderr, as_root
    missing = imagekit("verify", "no/such:image", "--runtime", "enroot")
    assert missing.code == 3 and "install enroot" in missing.stderr, missing
    assert "Traceback" not in as_root.stderr + missing.stderr
