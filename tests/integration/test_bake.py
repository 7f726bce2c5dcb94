"""imagekit bake: the generated docker-bake.json, printed and built by real buildx."""

from __future__ import annotations

import json
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
from docker.models.images import Image

from tests.integration.conftest import TEST_LABELS, Session, imagekit, matrix_text

# In the session beside the main one (scripts/run-tests.sh): nothing here needs the demo build.
# Its slim is the same steps as the demo's (the same base, wheels and epoch), so BuildKit runs
# each once for both, whichever comes first.
pytestmark = [pytest.mark.integration, pytest.mark.beside]


@pytest.fixture(autouse=True)
def _buildx() -> None:
    # A missing plugin fails, never skips: `make engine` installs it.
    found = subprocess.run(["docker", "buildx", "version"], capture_output=True)
    if found.returncode != 0:
        pytest.fail("docker buildx is not installed; run `make engine`")


def test_bake_print_resolves_full_to_its_slim_target(
    tmp_path: Path, session: Session, demo_base: str, wheelhouse: Path
) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(matrix_text(session.repository, demo_base))
    bake = tmp_path / "docker-bake.json"
    made = imagekit(
        "bake",
        "--matrix",
        str(matrix),
        "--out",
        str(bake),
        "--contexts",
        str(tmp_path / "ctx"),
        "--wheelhouse",
        str(wheelhouse),
        "--no-ca-cert",
    )
    assert made.code == 0, made.stderr
    printed = subprocess.run(
        ["docker", "buildx", "bake", "--print", "-f", str(bake)],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(printed.stdout)
    slim, full = "2_13_0-cpu-py3_11-slim", "2_13_0-cpu-py3_11-full"
    assert sorted(data["group"]["default"]["targets"]) == sorted([full, slim])
    slim_ref = f"{session.repository}:2.13.0-cpu-py3.11-slim"
    assert data["target"][full]["contexts"] == {slim_ref: f"target:{slim}"}
    assert data["target"][slim]["args"]["BASE_IMAGE"] == demo_base
    assert f"{session.repository}:latest-slim" in data["target"][slim]["tags"]
    assert (
        "--mount=type=cache"
        in (tmp_path / "ctx" / "2.13.0-cpu-py3.11-slim" / "Dockerfile").read_text()
    )


@dataclass
class Baked:
    image: Image
    marker: str
    said: str  # what `imagekit bake` printed


@pytest.fixture(scope="module")
def baked(
    tmp_path_factory: pytest.TempPathFactory,
    session: Session,
    demo_base: str,
    wheelhouse: Path,
    engine: docker.DockerClient,
) -> Baked:
    """The slim target of a real bake, with a marked CA bundle as its secret."""
    # The full target's named context needs Dockerfile frontend >= 1.4, which Debian's
    # Docker 20.10 does not have built in (and no frontend image can be pulled here);
    # the slim target needs nothing beyond the built-in frontend.
    tmp_path = tmp_path_factory.mktemp("bake")
    repository = session.repository.replace("/", "-bake/")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(matrix_text(repository, demo_base))
    marker = f"IMAGEKIT-BAKE-CA-{secrets.token_hex(8)}"
    ca = tmp_path / "ca.crt"
    ca.write_text(Path("/etc/ssl/certs/ca-certificates.crt").read_text() + f"# {marker}\n")
    bake = tmp_path / "docker-bake.json"
    made = imagekit(
        "bake",
        "--matrix",
        str(matrix),
        "--out",
        str(bake),
        "--contexts",
        str(tmp_path / "ctx"),
        "--wheelhouse",
        str(wheelhouse),
        "--ca-cert",
        str(ca),
        "--flavour",
        "slim",
    )
    assert made.code == 0, made.stderr
    built = subprocess.run(
        ["docker", "buildx", "bake", "-f", str(bake), "--progress", "plain"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return Baked(engine.images.get(f"{repository}:2.13.0-cpu-py3.11-slim"), marker, made.stderr)


def test_a_real_bake_builds_the_slim_target_with_the_ca_as_a_secret(
    baked: Baked, engine: docker.DockerClient
) -> None:
    image = baked.image
    assert image.labels["io.imagekit.torch"] == "2.13.0"
    out = engine.containers.run(
        image.id,
        ["python", "-c", "import torch; print(torch.__version__)"],
        remove=True,
        labels=TEST_LABELS,
    )
    assert out.decode().strip() == "2.13.0+cpu"
    saved = b"".join(image.save(named=False))
    assert baked.marker.encode() not in saved  # layers are uncompressed tars in docker save


def test_imagekit_build_with_buildx_builds_the_bakes_image_then_reports_up_to_date(
    tmp_path: Path,
    session: Session,
    demo_base: str,
    wheelhouse: Path,
    engine: docker.DockerClient,
    baked: Baked,
) -> None:
    """`imagekit build` and a bake of the same cell stamp the same epoch (the base's, where no
    SOURCE_DATE_EPOCH is given), so they make the same layers, and bake says of no base that it
    is not reproducible."""
    repository = session.repository.replace("/", "-buildx/")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(matrix_text(repository, demo_base))
    args = [
        "build",
        "--matrix",
        str(matrix),
        "--builder",
        "buildx",
        "--flavour",
        "slim",
        "--wheelhouse",
        str(wheelhouse),
        "--no-ca-cert",
        "--results",
        str(tmp_path),
        "--json",
    ]
    first = imagekit(*args)
    assert first.code == 0, first.stderr[-3000:]
    row = json.loads(first.stdout)["results"][0]
    assert row["status"] == "built"
    log = Path(row["log_path"]).read_text()
    assert "--mount=type=cache" in log or "[builder" in log  # BuildKit's own progress output
    image = engine.images.get(row["image_id"])
    assert image.labels["io.imagekit.input-hash"] == row["input_hash"]
    assert "SOURCE_DATE_EPOCH" not in baked.said, baked.said
    epoch = image.labels["io.imagekit.source-date-epoch"]
    assert baked.image.labels["io.imagekit.source-date-epoch"] == epoch
    assert image.attrs["RootFS"]["Layers"] == baked.image.attrs["RootFS"]["Layers"]
    again = imagekit(*args)
    assert again.code == 0
    assert json.loads(again.stdout)["results"][0]["status"] == "up-to-date"
