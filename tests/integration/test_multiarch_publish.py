"""One tag, two platforms: `imagekit publish` assembles an index on a real registry.

No emulation is needed for this part: the two "images" are the demo's base with the demo slim's
labels (what publish reads; the test is about the index, and a base is a tenth of slim's bytes
to push), once as it is and once imported again with an arm64 platform in its config (its
programs stay x86_64, so the inventory publish takes runs natively). What is checked is what
the registry ends up holding: one manifest per platform under its platform tag, and one index
of both under the image's versioned tag and aliases, as `docker manifest inspect` shows it.
The real arm64 build and its verification under emulation are in tests/integration/
test_arm64.py (`make test-arm64`).
"""

from __future__ import annotations

import io
import json
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from imagekit.adapters.registry_api import MANIFEST_TYPES
from tests.integration.conftest import TEST_LABELS, DemoBuild, Session, imagekit
from tests.integration.engines import running_registry

pytestmark = pytest.mark.integration

TAG = "2.14.1-cuda13.0-cudnn9-py3.11-slim"
ALIASES = ("2.14-cuda13.0-slim", "latest-slim", "latest")
MATRIX = """\
schema_version: 1
repository: {repository}
bases:
  debian-12:
    linux/amd64: "{base}"
    linux/arm64: "{base}-arm64"
defaults:
  os: debian-12
  python: "3.11"
  platforms: [linux/amd64, linux/arm64]
flavours:
  slim: {{size_budget_bytes: 9000000000}}
  full: {{size_budget_bytes: 9000000000}}
releases:
  - torch: "2.14.1"
    cuda: ["13.0"]
    flavours: [slim]
latest: {{torch: "2.14.1", cuda: "13.0"}}
"""


@dataclass
class TwoPlatforms:
    matrix: Path
    results: Path
    repository: str
    registry: str


def registry_document(registry: str, path: str, reference: str) -> tuple[str, dict]:
    """The digest and JSON of what `reference` (tag or digest) names on the registry."""
    request = urllib.request.Request(
        f"http://{registry}/v2/{path}/manifests/{reference}", headers={"Accept": MANIFEST_TYPES}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(response.headers["Docker-Content-Digest"]), json.loads(response.read())


@pytest.fixture(scope="module")
def two_platforms(
    demo_build: DemoBuild,
    demo_base: str,
    session: Session,
    engine: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[TwoPlatforms]:
    """A small stand-in for the demo slim (its base, its labels), once as the amd64 and once
    as the arm64 image of a two-platform cell, and a registry to publish them to."""
    folder = tmp_path_factory.mktemp("multiarch")
    demo_slim = next(r for n, r in demo_build.records.items() if n.endswith("-slim"))
    labels = engine.images.get(demo_slim["build"]["image_id"]).labels
    dockerfile = f"FROM {demo_base}\nLABEL " + " ".join(
        f"{json.dumps(k)}={json.dumps(v)}" for k, v in sorted(labels.items())
    )
    # The session's test label: the session removes it even if it ends up untagged.
    source, _ = engine.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=f"{session.repository}:{TAG}", rm=True,
        labels=TEST_LABELS,
    )  # fmt: skip
    container = engine.containers.create(source.id, entrypoint=["true"])
    try:
        exported = subprocess.Popen(["docker", "export", container.id], stdout=subprocess.PIPE)
        imported = subprocess.run(
            [
                "docker", "import", "--platform", "linux/arm64",
                "--change", "ENV PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin",
                "-", f"{session.repository}:{TAG}-arm64",
            ],
            stdin=exported.stdout, capture_output=True, text=True, check=False,
        )  # fmt: skip
        exported.wait()
    finally:
        container.remove(force=True)
    assert imported.returncode == 0, imported.stderr
    matrix = folder / "matrix.yaml"
    matrix.write_text(MATRIX.format(repository=session.repository, base="unused/base:1"))
    (folder / "registry").mkdir()
    with running_registry(folder / "registry") as host:
        yield TwoPlatforms(matrix, folder / "results", session.repository, host)


def publish(setup: TwoPlatforms, *args: str) -> tuple[int, dict, str]:
    result = imagekit(
        "publish", "--matrix", str(setup.matrix), "--registry", setup.registry, "--force",
        "--results", str(setup.results), "--json", *args,
    )  # fmt: skip
    return result.code, json.loads(result.stdout or "{}"), result.stderr


@pytest.fixture(scope="module")
def first_publish(two_platforms: TwoPlatforms) -> dict:
    code, document, stderr = publish(two_platforms)
    assert code == 0, stderr[-3000:]
    return document


def test_each_platform_is_pushed_under_its_platform_tag_and_the_index_under_the_image_tags(
    two_platforms: TwoPlatforms, first_publish: dict
) -> None:
    records = {r["name"]: r for r in first_publish["images"]}
    assert set(records) == {
        "2.14.1-cu130-py3.11-slim",
        "2.14.1-cu130-py3.11-arm64-slim",
        "2.14.1-cu130-py3.11-slim-index",
    }
    path = f"{two_platforms.repository}"
    amd_tags = [t["tag"].rsplit(":", 1)[1] for t in records["2.14.1-cu130-py3.11-slim"]["tags"]]
    assert amd_tags == [f"{TAG}-amd64"]
    index = records["2.14.1-cu130-py3.11-slim-index"]
    assert index["status"] == "published"
    assert [t["tag"].rsplit(":", 1)[1] for t in index["tags"]] == [TAG, *ALIASES]
    digest, body = registry_document(two_platforms.registry, path, TAG)
    assert digest == index["image_id"] and all(t["digest"] == digest for t in index["tags"])
    platforms = {
        (m["platform"]["architecture"], m["platform"].get("variant")): m["digest"]
        for m in body["manifests"]
    }
    assert set(platforms) == {("amd64", None), ("arm64", "v8")}
    for arch in ("amd64", "arm64"):
        pushed, _ = registry_document(two_platforms.registry, path, f"{TAG}-{arch}")
        assert platforms[(arch, "v8" if arch == "arm64" else None)] == pushed
    for alias in ALIASES:
        assert registry_document(two_platforms.registry, path, alias)[0] == digest


def test_docker_manifest_inspect_shows_both_platforms(
    two_platforms: TwoPlatforms, first_publish: dict
) -> None:
    done = subprocess.run(
        [
            "docker", "manifest", "inspect", "--insecure",
            f"{two_platforms.registry}/{two_platforms.repository}:{TAG}",
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert sorted(m["platform"]["architecture"] for m in shown["manifests"]) == ["amd64", "arm64"]


def test_publishing_the_same_images_again_changes_nothing(
    two_platforms: TwoPlatforms, first_publish: dict
) -> None:
    code, document, stderr = publish(two_platforms)
    assert code == 0, stderr[-3000:]
    statuses = {r["name"]: r["status"] for r in document["images"]}
    assert statuses == {
        "2.14.1-cu130-py3.11-slim": "unchanged",
        "2.14.1-cu130-py3.11-arm64-slim": "unchanged",
        "2.14.1-cu130-py3.11-slim-index": "unchanged",
    }


def test_one_platform_alone_is_refused_before_anything_is_pushed(
    two_platforms: TwoPlatforms, first_publish: dict
) -> None:
    code, _, stderr = publish(two_platforms, "--platform", "linux/arm64")
    assert code == 2, stderr
    assert f"{TAG} is one index of linux/amd64, linux/arm64" in stderr
    assert "needs linux/amd64 too" in stderr
