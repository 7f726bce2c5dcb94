"""Builds as CI runners and air-gapped builders run them: offline, from a registry cache on a
fresh engine, byte for byte again, with zstd layers.

One cold build serves them all (a cold BuildKit build of slim and full is minutes on two
cores): the CPU example, slim with torch.compile's g++ and full with its workstation packages,
on a base bootstrapped `--packages-for full`, `--network none` with a wheelhouse, `--no-cache`,
its cache exported to a registry (`--cache-to`), on Docker 26 with the containerd store.

- air-gapped: no build stage reached a package mirror (the apt steps found every package
  installed); on the demo base, slim's torch.compile packages are refused in one line; without
  a wheelhouse the same build fails, naming what it could not reach;
- `--cache-from` on an empty engine (no way out, as a CI runner starts): the venv's layer comes
  from the registry, not a rebuild;
- the same slim built cold on that other engine is the same image, layer for layer, and
  publishing it pushes nothing;
- `--compression zstd`: the layers the engine keeps are zstd.

They need the containerd store (the classic store refuses `--cache-to` and `--compression`), so
they run on boxed Docker 26 engines (tests/integration/engines.py), whatever the host has. They
run beside the main session (marker `contract`).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from imagekit.build.reproducible import epoch_of
from tests.integration.conftest import TEST_LABELS, Session, imagekit, matrix_text
from tests.integration.engines import (
    OtherEngine,
    holding,
    running_registry,
    start_docker_containerd,
    start_docker_fresh,
)

pytestmark = [pytest.mark.integration, pytest.mark.contract]

TAG = "2.13.0-cpu-py3.11-slim"
FULL_TAG = "2.13.0-cpu-py3.11-full"
# Bridges of their own: the engine contract's boxed dockerd uses ikt-br0 at the same time.
BRIDGE, SUBNET = "ikt-br1", "10.213.8.1/24"
STORE_BRIDGE, STORE_SUBNET = "ikt-br2", "10.213.9.1/24"


@pytest.fixture(scope="module")
def airgap_base(session: Session) -> str:
    """A base bootstrapped `--packages-for full` on the default engine: every Debian package
    slim (torch.compile's g++ too) and full install is already in it."""
    base = f"{session.repository.split('/')[0]}-airgap/debian:bookworm"
    made = imagekit("base", "bootstrap", "--suite", "bookworm", "--packages-for", "full",
                    "--tag", base)  # fmt: skip
    assert made.code == 0, made.stderr[-3000:]
    return base


@pytest.fixture(scope="module")
def registry_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache-registry")


@pytest.fixture(scope="module")
def registry(registry_folder: Path) -> Iterator[str]:
    with running_registry(registry_folder) as host:
        yield host


@pytest.fixture(scope="module")
def containerd_engine(engine: docker.DockerClient, airgap_base: str) -> Iterator[OtherEngine]:
    """Docker 26 with the containerd image store, holding the base: where the cache is made."""
    root = Path(f"/tmp/imagekit-it-store-{secrets.token_hex(3)}")
    started = start_docker_containerd(root, STORE_BRIDGE, STORE_SUBNET)
    with holding(engine, airgap_base, started) as other:
        yield other


@pytest.fixture(scope="module")
def fresh_engine(engine: docker.DockerClient, airgap_base: str) -> Iterator[OtherEngine]:
    """An empty dockerd with the containerd store, holding only the base (a runner's pull)."""
    root = Path(f"/tmp/imagekit-it-fresh-{secrets.token_hex(3)}")
    with holding(engine, airgap_base, start_docker_fresh(root, BRIDGE, SUBNET)) as other:
        yield other


def build(matrix: Path, results: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    done = imagekit(
        "build", "--matrix", str(matrix), "--flavour", "slim", "--no-ca-cert",
        "--results", str(results), "--json", *args, env=env,
    )  # fmt: skip
    assert done.code == 0, done.stderr[-3000:]
    (record,) = json.loads(done.stdout)["results"]
    return record


@dataclass(frozen=True)
class ColdBuild:
    """Slim and full built cold and offline with BuildKit on the containerd engine, their
    cache exported."""

    matrix: Path
    results: Path
    records: dict[str, dict]  # by image name
    cache: str

    @property
    def record(self) -> dict:
        """Slim's."""
        return self.records[TAG]


@pytest.fixture(scope="module")
def cold_build(
    session: Session,
    airgap_base: str,
    wheelhouse: Path,
    tmp_path_factory: pytest.TempPathFactory,
    containerd_engine: OtherEngine,
    registry: str,
) -> ColdBuild:
    """The module's one cold build (see its doc): `--network none`, the wheelhouse is all it
    may use; `--no-cache`, BuildKit's cache of an earlier run would leave steps unrun."""
    folder = tmp_path_factory.mktemp("cold")
    repository = f"{session.repository}-cache"
    cache = f"{registry}/{repository.split('/')[0]}/cache"
    matrix = folder / "matrix.yaml"
    matrix.write_text(matrix_text(repository, airgap_base))
    done = imagekit(
        "build", "--matrix", str(matrix), "--no-ca-cert", "--wheelhouse", str(wheelhouse),
        "--builder", "buildx", "--network", "none", "--no-cache", "--cache-to", cache,
        "--results", str(folder / "first"), "--json", env=containerd_engine.env(local=True),
    )  # fmt: skip
    assert done.code == 0, done.stderr[-3000:]
    records = {r["name"]: r for r in json.loads(done.stdout)["results"]}
    assert {r["status"] for r in records.values()} == {"built"}
    return ColdBuild(matrix, folder / "first", records, cache)


def test_air_gapped_every_flavour_builds_on_a_base_that_carries_its_packages(
    cold_build: ColdBuild, containerd_engine: OtherEngine, tmp_path: Path
) -> None:
    """No package mirror and a wheelhouse: slim (with torch.compile's g++) and full (with its
    workstation packages) built on a base bootstrapped `--packages-for full`; their apt steps
    found everything installed and ran no apt at all."""
    records = cold_build.records
    assert set(records) == {TAG, FULL_TAG}
    logs = "".join(p.read_text() for p in cold_build.results.glob("*/logs/*.build.log"))
    assert "Reading package lists" not in logs  # apt never ran
    client = containerd_engine.client()
    try:
        for name, look in (
            (TAG, "command -v g++ && test ! -e /usr/share/jupyter"),
            (FULL_TAG, "command -v sshd jupyter ninja"),
        ):
            said = client.containers.run(
                records[name]["image_id"],
                ["bash", "-c", f"{look} && ls /etc/ssh/ssh_host_* 2>/dev/null | wc -l"],
                entrypoint=[], remove=True, labels=TEST_LABELS,
            ).decode()  # fmt: skip
            # No SSH host key anywhere: the base's were removed when it was made.
            assert said.splitlines()[-1] == "0", said
    finally:
        client.close()
    # Both pass their structure checks as they are; slim's sshd is named as its base's.
    env = containerd_engine.env(local=True)
    verified = imagekit(
        "verify", "--matrix", str(cold_build.matrix), "--probes", "env",
        "--results", str(tmp_path / "r"), "--json", env=env,
    )  # fmt: skip
    assert verified.code == 0, verified.stderr[-3000:]
    images = json.loads(verified.stdout)["images"]
    checks = {c["name"]: c for c in images[TAG]["verify"]["structure"]}
    services = checks["slim carries no jupyter, tensorboard or sshd"]
    assert services["ok"] and "from its base" in services["detail"], services
    # The same build from an index, with no network (the legacy builder's): refused by the
    # network, not by imagekit.
    failed = imagekit(
        "build", "--matrix", str(cold_build.matrix), "--flavour", "slim", "--no-ca-cert",
        "--no-cache", "--builder", "sdk", "--network", "none",
        "--results", str(tmp_path / "r2"), env=env,
    )  # fmt: skip
    assert failed.code != 0
    log = next((tmp_path / "r2").glob("*/logs/*slim.build.log")).read_text()
    assert "download.pytorch.org" in log, log[-2000:]


def test_air_gapped_a_step_without_its_packages_is_one_line_naming_them(
    session: Session, demo_base: str, wheelhouse: Path, tmp_path: Path
) -> None:
    """The demo base lacks torch.compile's packages: with no mirror, slim's build fails with
    the step's own line (BuildKit runs the stages at once, so it fails within seconds)."""
    path = tmp_path / "matrix.yaml"
    path.write_text(matrix_text(f"{session.repository}-nomirror", demo_base))
    failed = imagekit(
        "build", "--matrix", str(path), "--flavour", "slim", "--no-ca-cert",
        "--wheelhouse", str(wheelhouse), "--builder", "buildx", "--network", "none",
        "--results", str(tmp_path / "r"),
    )  # fmt: skip
    assert failed.code == 4, failed.stderr[-3000:]
    (line,) = [x for x in failed.stderr.splitlines() if ": failed: slim's runtime stage" in x]
    # openssl is there: the base's ca-certificates brings it.
    assert "needs g++ python3.11-dev, which the base lacks" in line, line
    assert "--packages-for slim" in line and "W: Failed to fetch" in line, line


def test_a_fresh_engine_builds_from_the_registry_cache_without_rebuilding_the_venv(
    wheelhouse: Path,
    tmp_path: Path,
    containerd_engine: OtherEngine,
    registry: str,
    fresh_engine: OtherEngine,
    cold_build: ColdBuild,
) -> None:
    matrix, first, cache = cold_build.matrix, cold_build.record, cold_build.cache
    common = ("--wheelhouse", str(wheelhouse), "--builder", "buildx", "--network", "none")
    # The registry holds one cache per image, tagged as the image is.
    assert subprocess.run(
        ["curl", "-sf", f"http://{registry}/v2/{cache.split('/', 1)[1]}/tags/list"],
        capture_output=True, text=True, check=True,
    ).stdout.count(TAG) == 1  # fmt: skip

    again = build(
        matrix, tmp_path / "again", *common, "--cache-from", cache, env=fresh_engine.env(local=True)
    )
    assert again["status"] == "built"
    log = Path(again["log_path"]).read_text()
    assert f"importing cache manifest from {cache}:{TAG}" in log
    install = next(line for line in log.splitlines() if "uv pip install" in line)
    step = install.split()[0]  # "#7"
    assert f"{step} CACHED" in log, log[-3000:]
    # The venv's layer is the very layer the first engine made.
    assert layers_of(fresh_engine, again["image_id"]) == layers_of(
        containerd_engine, first["image_id"]
    )


def config_times(engine: OtherEngine, image_id: str) -> tuple[int | None, str]:
    """An image's creation time on `engine` (seconds since 1970), and its epoch label."""
    client = engine.client()
    try:
        image = client.images.get(image_id)
        label = image.labels.get("io.imagekit.source-date-epoch", "")
        return epoch_of(image.attrs["Created"]), label
    finally:
        client.close()


def layers_of(engine: OtherEngine, image_id: str) -> list[str]:
    """The diff ids of an image on `engine`."""
    client = engine.client()
    try:
        return list(client.images.get(image_id).attrs["RootFS"]["Layers"])
    finally:
        client.close()


def test_zstd_layers_are_what_the_engine_keeps(
    wheelhouse: Path, tmp_path: Path, containerd_engine: OtherEngine, cold_build: ColdBuild
) -> None:
    """`--compression zstd` after the cold build (BuildKit's default, unasked): another image, so
    not "up to date" (the tag moves to it), its every layer zstd. From the cold build's own
    inputs (`--network none` too), so its steps come from that build's cache and only the
    export is paid."""
    gzip = cold_build.record
    unasked = layer_types(containerd_engine, gzip["image_id"], tmp_path)
    assert unasked and not [t for t in unasked if "zstd" in t], unasked
    args = ("--wheelhouse", str(wheelhouse), "--builder", "buildx", "--network", "none")
    env = containerd_engine.env(local=True)
    # A second name keeps the cold build's image while the tag moves: the containerd store
    # drops an image with no name left.
    reference = str(gzip["reference"])
    name, _, tag = reference.rpartition(":")
    client = containerd_engine.client()
    client.api.tag(reference, name, tag + "-kept")
    try:
        zstd = build(cold_build.matrix, tmp_path / "z", *args, "--compression", "zstd", env=env)
        assert zstd["status"] == "built" and zstd["image_id"] != gzip["image_id"]
        zstd_types = layer_types(containerd_engine, zstd["image_id"], tmp_path)
        assert zstd_types == {"application/vnd.oci.image.layer.v1.tar+zstd"}
    finally:
        # The tag back on the cold build's image: the test below publishes it.
        client.api.tag(f"{reference}-kept", name, tag)
        client.api.remove_image(f"{reference}-kept", noprune=True)
        client.close()


def layer_types(engine: OtherEngine, image_id: str, folder: Path) -> set[str]:
    """The media types of an image's layers, from the OCI layout `docker save` writes."""
    archive = folder / f"{image_id.split(':')[-1][:12]}.tar"
    client = engine.client()
    try:
        with archive.open("wb") as handle:
            for chunk in client.images.get(image_id).save():
                handle.write(chunk)
    finally:
        client.close()
    with tarfile.open(archive) as tar:

        def blob(name: str) -> dict:
            handle = tar.extractfile(name)
            assert handle is not None
            return json.loads(handle.read())

        pending = [m["digest"] for m in blob("index.json")["manifests"]]
        types: set[str] = set()
        while pending:
            document = blob("blobs/sha256/" + pending.pop().split(":")[1])
            pending += [m["digest"] for m in document.get("manifests", [])]
            # Attestation manifests (in-toto) are not image layers.
            types |= {
                x["mediaType"]
                for x in document.get("layers", [])
                if "in-toto" not in x["mediaType"]
            }
    archive.unlink()
    return types


def registry_blobs(folder: Path) -> set[str]:
    """The blob digests a docker-registry holds under its storage `folder`."""
    return {p.parent.name for p in folder.glob("data/docker/registry/v2/blobs/sha256/*/*/data")}


def test_two_cold_builds_on_two_fresh_engines_are_the_same_image_and_publish_pushes_nothing(
    wheelhouse: Path,
    tmp_path: Path,
    containerd_engine: OtherEngine,
    fresh_engine: OtherEngine,
    registry_folder: Path,
    registry: str,
    cold_build: ColdBuild,
) -> None:
    """BuildKit with SOURCE_DATE_EPOCH (the base's creation time), the Dockerfile's own file
    times and no provenance attestation: the same inputs on two engines that share nothing but
    the base make the same image digest, layer for layer; publishing the rebuild moves no tag
    and uploads no layer."""
    # The first is the module's cold build; the second, as cold, on the other engine (--no-cache:
    # not from the cache the first exported, which that engine imported in the test above).
    matrix, first = cold_build.matrix, cold_build.record
    common = ("--wheelhouse", str(wheelhouse), "--builder", "buildx", "--no-cache")
    again = build(
        matrix, tmp_path / "again", *common, "--network", "none", env=fresh_engine.env(local=True)
    )
    assert first["status"] == again["status"] == "built"
    # The config says the epoch it was built with, not when it was built.
    created, epoch = config_times(fresh_engine, again["image_id"])
    assert created is not None and str(created) == epoch
    assert layers_of(fresh_engine, again["image_id"]) == layers_of(
        containerd_engine, first["image_id"]
    )
    assert again["image_id"] == first["image_id"]

    def publish(engine: OtherEngine, results: Path) -> dict:
        # --force: the gate (a verify record) is not what this shows; the bytes are.
        done = imagekit(
            "publish", "--matrix", str(matrix), "--flavour", "slim", "--registry", registry,
            "--force", "--results", str(results), "--json", env=engine.env(local=True),
        )  # fmt: skip
        assert done.code == 0, done.stderr[-3000:]
        (image,) = json.loads(done.stdout)["images"]
        return image

    published = publish(containerd_engine, cold_build.results)
    assert published["status"] == "published"
    blobs = registry_blobs(registry_folder)
    republished = publish(fresh_engine, tmp_path / "again")
    assert [t["status"] for t in republished["tags"]] == ["unchanged"] * len(published["tags"])
    assert [t["digest"] for t in republished["tags"]] == [t["digest"] for t in published["tags"]]
    # And pushed as it is, by the engine itself: every layer is already there.
    client = fresh_engine.client()
    try:
        tag = published["tags"][0]["tag"]
        name, _, version = tag.rpartition(":")
        client.api.tag(again["image_id"], name, version)
        statuses = {
            item["id"]: item["status"]
            for item in client.api.push(name, version, stream=True, decode=True)
            if item.get("id") and "status" in item
        }
    finally:
        client.close()
    assert statuses and set(statuses.values()) == {"Layer already exists"}, statuses
    assert registry_blobs(registry_folder) == blobs
